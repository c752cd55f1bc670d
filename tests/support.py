"""Shared test helpers: servers on port 0 that report their port, and real peer servers
started and stopped by PID.

Import them as `from support import ...` (a unique module name: `from conftest import` would
pick whichever of the several conftest.py modules pytest imported first).

Peer binaries (Debian's beanstalkd, PostgreSQL, Java) are installed by ``scripts/system-deps.sh``
(run by ``make test``). Locally a missing binary skips its tests; under CI (``CI`` set) it fails,
so a broken install step can never pass as green.
"""

from __future__ import annotations

import atexit
import contextlib
import doctest
import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

from stalkd.pids import pid_alive

T = TypeVar("T")


def listening_ports(pid: int) -> list[int]:
    """TCP ports process ``pid`` listens on, in the order of its file descriptors (so the
    socket it opened first comes first); [] when it listens on nothing (yet).

    Read from ``/proc``: the process's socket inodes, then the kernel's TCP tables in its
    network namespace, so a server started with ``-p 0`` needs no way of its own to report the
    port the kernel gave it. The tables are read only once the process has a socket, and tcp6
    only for sockets tcp does not list: reading one takes milliseconds of kernel time (it walks
    every bucket of the machine's TCP hash), and a caller polling a starting server would
    otherwise take a core from it on a 2-core machine.
    """
    inodes: list[str] = []
    try:
        fds = sorted(os.listdir(f"/proc/{pid}/fd"), key=int)
    except FileNotFoundError:
        return []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed while we looked
            continue
        if target.startswith("socket:["):
            inodes.append(target[8:-1])
    listening: dict[str, int] = {}
    for table in ("tcp", "tcp6"):
        if not inodes or all(inode in listening for inode in inodes):
            break
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A":  # TCP_LISTEN
                listening[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
    return [listening[inode] for inode in inodes if inode in listening]


def stop_process(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and return once every one of its threads is stopped. kill() returns
    before that: the thread the kernel picks must run to stop the others, and meanwhile a
    thread already running goes on (a worker's handler can finish a job)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                states.append(task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0])
        if states and all(st in ("T", "t") for st in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} not stopped after {timeout} s: thread states {states}")
        time.sleep(0.001)


def has_exited(pid: int) -> bool:
    """Whether process ``pid`` has exited: it is gone, or a zombie its parent has not reaped
    yet. A daemon the tests did not start as a child (PostgreSQL's postmaster, reparented to
    PID 1) is reaped whenever PID 1 gets to it, seconds later under load, and ``kill(pid, 0)``
    succeeds on a zombie: waiting for that waits for the reaper, not for the process."""
    return not pid_alive(pid)


def wait_for_listener(proc: subprocess.Popen[bytes], timeout: float = 10.0, what: str = "server") -> int:
    """The port ``proc`` (started with port 0) listens on, once it listens; polls ``/proc``
    every millisecond rather than sleeping blindly. The first listener opened wins."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        ports = listening_ports(proc.pid)
        if ports:
            return ports[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} (pid {proc.pid}) listened on no TCP port after {timeout}s")
        time.sleep(0.001)


def spawn_server(cmd: list[str], host: str = "127.0.0.1", *, what: str = "server",
                 timeout: float = 10.0, log: Path | None = None, **popen: Any) -> ServerProcess:
    """Start ``cmd`` (which listens on ``host`` port 0) and return it once it listens, with the
    port the kernel gave it. Killed and reaped if it does not get that far.

    ``log``: a file (in the test's tmp dir) that gets the server's stdout and stderr, and whose
    text the error shows when the server does not come up. Never a pipe nobody reads: a server
    that writes more than the pipe holds blocks, and what it said is lost."""
    proc = popen_logged(cmd, log, **popen) if log is not None else subprocess.Popen(cmd, **popen)
    try:
        with _showing_output(log, what):
            port = wait_for_listener(proc, timeout, what)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return ServerProcess(host, port, proc)


@functools.cache
def _session_dir() -> str:
    d = tempfile.mkdtemp(prefix="stalkd-tests-")
    atexit.register(shutil.rmtree, d, True)
    return d


def session_file(prefix: str, suffix: str = "") -> tuple[int, str]:
    """``tempfile.mkstemp`` in a directory of this test process's own, removed when it exits:
    a server's log that a failing test shows, without a file left in /tmp by every server."""
    return tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=_session_dir())


def popen_logged(cmd: list[str], log: Path, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with its stdout and stderr appended to the file ``log`` (in the test's tmp
    dir), to show when the test fails (``log_tail``). Never ``stderr=PIPE`` for a child nobody
    reads while it runs: once it has written what a pipe holds (64 KiB) it blocks for ever."""
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **popen)


def log_tail(log: Path, size: int = 16384) -> str:
    """The last ``size`` bytes of ``log``, as text (what a failed assertion shows)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


@contextlib.contextmanager
def _showing_output(log: Path | None, what: str) -> Iterator[None]:
    """A server's start-up failure, re-raised with the end of ``log`` (its output) appended."""
    try:
        yield
    except (RuntimeError, TimeoutError) as exc:
        if log is None:
            raise
        raise type(exc)(f"{exc}\n--- {what}'s output ({log}), its end ---\n{log_tail(log)}") from exc


@contextlib.contextmanager
def reserved_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port that refuses connections and that only a server of the test's can take.

    The socket is bound with SO_REUSEADDR but never listens: connecting gets "connection
    refused", the kernel gives the port to nobody else (``bind`` to port 0 skips owned ports),
    and a server started on it (stalkd and beanstalkd both set SO_REUSEADDR) can bind it while
    this socket is held. For "nothing listens there yet" and "restart on the same port" tests.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        yield int(s.getsockname()[1])


@contextlib.contextmanager
def small_tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (a mount option such as ``"4m"``) mounted under ``tmp_path`` for one
    test, for real full-disk behaviour (needs root and mount; skipped where either is missing)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small file system needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=30)


def wait_until(cond: Callable[[], T], what: str = "a condition", timeout: float = 30.0,
               step: float = 0.02) -> T:
    """Poll ``cond`` until it returns something true and return that, or fail naming ``what``
    after ``timeout`` seconds (a condition with a deadline, never a guessed sleep). The one
    poll-until helper of the suite: every test waits with it."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(step)


def require_binary(name: str) -> str:
    """Path of ``name``; skip the test when it is missing, unless running under CI."""
    path = shutil.which(name)
    if path is None:
        msg = f"{name} is not installed (scripts/system-deps.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def wait_for_port(host: str, port: int, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts on host:port (polling a connect, not sleeping blindly)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s") from None
            time.sleep(0.01)


def wait_serving(host: str, port: int = 0, timeout: float = 60.0,
                 proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until the beanstalkd-protocol server on host:port (or ``unix:PATH`` as host)
    answers a command. stalkd listens before it imports its engine and recovers
    (node/cli.py), so "listening" is not "serving": under load the first reply can be seconds
    away, and a test whose client has a short reply timeout would time out on the server's
    start-up rather than on what it tests. Connecting is retried while nothing listens yet (a
    UNIX socket's file appears only when it listens), failing at once if ``proc`` exits.

    The probe hangs up and waits for the server to close its side, so the server has counted
    the connection gone before this returns: tests asserting ``current-connections`` see only
    their own. ``timeout`` is only a safety bound on the wait."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            s = _connect(host, port, timeout)
            break
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode} before serving") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing accepted on {host}:{port} after {timeout}s") from None
            time.sleep(0.01)
    with s:
        s.sendall(b"list-tube-used\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(64)
            if not chunk:
                raise RuntimeError(f"server on {host}:{port} hung up before answering")
            reply += chunk
        s.shutdown(socket.SHUT_WR)
        while s.recv(64):
            pass
    if not reply.startswith(b"USING "):
        raise RuntimeError(f"server on {host}:{port} answered {reply!r} to list-tube-used")


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    if not host.startswith("unix:"):
        return socket.create_connection((host, port), timeout=timeout)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(host[len("unix:"):])
    except BaseException:
        s.close()
        raise
    return s


def spawn_serving(cmd: list[str], host: str = "127.0.0.1", *, what: str = "server",
                  log: Path | None = None, **popen: Any) -> ServerProcess:
    """``spawn_server``, returned once the server answers (see wait_serving), not merely
    listens. Stopped if it does not get that far (with ``log``'s text in the error)."""
    server = spawn_server(cmd, host, what=what, log=log, **popen)
    try:
        with _showing_output(log, what):
            wait_serving(server.host, server.port, proc=server.proc)
    except BaseException:
        server.stop()
        raise
    return server


@dataclass
class ServerProcess:
    host: str
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_beanstalkd(*extra: str, port: int = 0, log: Path | None = None) -> ServerProcess:
    """Start Debian's beanstalkd on loopback (in memory unless -b is passed), on an ephemeral
    port unless ``port`` is given. Its output goes to ``log`` if given; else its stderr is the
    test's own (pytest captures it, and shows it with the test's failure)."""
    exe = require_binary("beanstalkd")
    cmd = [exe, "-l", "127.0.0.1", "-p", str(port), *extra]
    if log is not None:
        return spawn_server(cmd, what="beanstalkd", log=log)
    return spawn_server(cmd, what="beanstalkd", stdout=subprocess.DEVNULL)


def run_doctests(module: ModuleType, **testmod: Any) -> doctest.TestResults:
    """``doctest.testmod(module, **testmod)`` with ``tempfile``'s directory a fresh one that is
    removed afterwards. Examples make their directories with ``tempfile.mkdtemp()`` (a log
    preallocates a 64 MiB segment in each); run as they are written, every test run would
    leave them all in the real temporary directory."""
    saved = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix="stalkd-doctest-") as scratch:
        tempfile.tempdir = scratch
        try:
            return doctest.testmod(module, **testmod)
        finally:
            tempfile.tempdir = saved
