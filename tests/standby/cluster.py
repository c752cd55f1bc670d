"""A primary and its standbys as real processes on loopback (port 0), and the checks the
standby tests share: waiting for a standby to catch up, and comparing two servers' jobs
through the protocol."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import stalkd
from server.proc import StalkdProcess, start_stalkd
from stalkd.client import errors
from support import ServerProcess, listening_ports

WAL_SIZE = "65536"  # small segments: compaction and retention happen within a test's writes


def secret_file(d: Path) -> str:
    """The replication secret the servers of one test share (beside their data directories)."""
    for up in d.parents:  # a directory of the test's (say, on a file system it mounted)
        if (up / "replication.secret").exists():
            return str(up / "replication.secret")
    path = d.parent / "replication.secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(os.urandom(24).hex() + "\n")
        path.chmod(0o600)
    return str(path)


def primary(d: Path, *flags: str) -> StalkdProcess:
    return start_stalkd("--dir", str(d), "-s", WAL_SIZE, "--replication-secret", secret_file(d), *flags)


def standby(d: Path, of: ServerProcess, *flags: str, via: str | None = None) -> StalkdProcess:
    """A standby of ``of`` (through the address ``via`` when given: say, its TLS listener)."""
    return start_stalkd("--dir", str(d), "-s", WAL_SIZE, "--replication-secret", secret_file(d),
                        "--standby-of", via or of.address, *flags)


def admin_port(p: StalkdProcess, timeout: float = 60.0) -> int:
    """The admin endpoint's port (the second listening socket: --admin 127.0.0.1:0)."""
    deadline = time.monotonic() + timeout
    while True:
        ports = listening_ports(p.proc.pid)
        if len(ports) >= 2:
            return ports[1]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no admin listener on pid {p.proc.pid}:\n{p.log_text()}")
        time.sleep(0.01)


def until(cond: Callable[[], bool], what: str, timeout: float = 30.0, logs: tuple[StalkdProcess, ...] = ()) -> None:
    """Poll ``cond`` until true; fail naming ``what`` (with the servers' logs) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except (errors.ClientConnectionError, errors.ConnectionClosed) as e:  # not up yet, or gone
            for p in logs:
                if p.proc.poll() is not None:
                    raise AssertionError(f"{what}: pid {p.proc.pid} exited with {p.proc.returncode}:\n"
                                         f"{p.log_text()}") from e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n" + "\n".join(p.log_text() for p in logs))
        time.sleep(0.02)


def read_line(sock: socket.socket) -> bytes:
    """One reply line (or what came before the peer hung up)."""
    got = b""
    while not got.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        got += chunk
    return got


def stats(p: ServerProcess) -> dict[str, Any]:
    with stalkd.Client(p.address) as c:
        return dict(c.stats())


def caught_up(p: ServerProcess, s: ServerProcess) -> bool:
    """The standby holds every record the primary has written (both say so) and streams: while
    it resyncs, its lag is the one last known (0 if it was current when cut off), but it says
    it is not in sync."""
    ps, ss = stats(p), stats(s)
    return (ps.get("standbys", 0) >= 1 and ps.get("standby-lag") == 0
            and ss["binlog-records-written"] >= 0 and ss.get("primary-lag") == 0
            and ss.get("in-sync", True) is True)


def promote_by_signal(s: StalkdProcess) -> None:
    """SIGUSR2 until it is primary: a signal sent before the server serves is ignored."""

    def promoted() -> bool:
        if stats(s)["role"] == "primary":
            return True
        os.kill(s.proc.pid, signal.SIGUSR2)
        return False

    until(promoted, "the standby's promotion", logs=(s,))


def snapshot(p: ServerProcess, ids: int | Iterable[int]) -> dict[int, tuple[str, str, int, bytes]]:
    """Every job among ``ids`` (an int: 1 to it): (tube, state, priority, body), read by peek
    and stats-job; a reserved job counts as ready (a standby and a restart both see it so)."""
    out = {}
    with stalkd.Client(p.address) as c:
        for jid in range(1, ids + 1) if isinstance(ids, int) else ids:
            try:
                job = c.peek(jid)
                st = c.stats_job(jid)
            except errors.NotFound:
                continue
            state = "ready" if st["state"] == "reserved" else str(st["state"])
            out[jid] = (str(st["tube"]), state, int(st["pri"]), job.body)
    return out


class Relay:
    """A TCP relay on loopback (a port the kernel picks) to ``target``: a network path that
    ``cut`` breaks (every connection through it reset, new ones refused) and ``heal`` restores."""

    def __init__(self, target: ServerProcess) -> None:
        self.target = (target.host, target.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._open = True
        self._silent = False  # connections stay up, nothing goes through (a black hole)
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self._silent:
                with self._lock:
                    self._socks.add(down)  # accepted, never answered
                continue
            try:
                up = socket.create_connection(self.target, timeout=5) if self._open else None
            except OSError:
                up = None
            if up is None:
                down.close()
                continue
            up.settimeout(None)
            with self._lock:
                self._socks |= {down, up}
            self._relay(down, up)

    def _relay(self, down: socket.socket, up: socket.socket) -> None:
        """Copy both ways (a subclass may tamper with what goes down)."""
        threading.Thread(target=self._pump, args=(down, up), daemon=True).start()
        threading.Thread(target=self._pump, args=(up, down), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                if not self._silent:
                    dst.sendall(data)
        if self._silent:
            return  # not even the hang-up goes through
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self._open = False
        with self._lock:
            socks, self._socks = self._socks, set()
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def silence(self) -> None:
        """Every byte is dropped from now on, without a reset: only a heartbeat notices."""
        self._silent = True

    def heal(self) -> None:
        self._open = True
        self._silent = False

    def close(self) -> None:
        self.cut()
        self._listener.close()
