"""The servers under test: stalkd processes the harness starts, kills, pauses and restarts by
PID, each with its own data directory and log file.

A ``Node`` runs ``python -m stalkd.node.cli`` (the beanstalkd-compatible command line), in a
network namespace when the ``Net`` gave it one (it then listens on its own address there, a
fixed port being safe in a namespace of its own), else on loopback port 0 the first time and on
the port it got for every restart after (clients keep their addresses across a restart).
The port is read from the server's own log line ``stalkd listening on HOST:PORT``.

With ``clock_file`` the process runs under Debian's libfaketime, its wall clock offset by what
that file says (``+0``, ``+3600``, ``-600``...; the monotonic clock is left alone, as on a real
machine whose clock is stepped).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Cluster", "Node", "LIBFAKETIME", "wait_until"]

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
NS_PORT = 11300  # inside a namespace of its own, nothing else can hold it
_LISTENING = re.compile(r"stalkd listening on ([0-9.]+):(\d+)")
_SERVING = re.compile(r"serving \d+ ms after start")


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 60.0, step: float = 0.02) -> None:
    """Poll ``cond()`` until it is true; ``TimeoutError`` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(step)


@dataclass
class Node:
    name: str
    data_dir: Path
    flags: list[str] = field(default_factory=list)
    netns: str | None = None  # run inside this network namespace
    listen: str = "127.0.0.1"  # the address it listens on (its namespace's own, with netns)
    clock_file: Path | None = None
    pythonpath: Path | None = None  # run stalkd from this source tree (a planted bug's copy)
    log_dir: Path | None = None  # where its log goes (default: its data directory's parent)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def address(self) -> str:
        return f"{self.listen}:{self.port}"

    @property
    def log_path(self) -> Path:
        return (self.log_dir or self.data_dir.parent) / f"{self.name}.log"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def command(self) -> list[str]:
        port = NS_PORT if self.netns else self.port
        cmd = [sys.executable, "-m", "stalkd.node.cli", "-l", self.listen, "-p", str(port),
               "--dir", str(self.data_dir), *self.flags]
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd, "--plain-network-ok"]
        return cmd

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.pythonpath is not None:  # ahead of the installed stalkd
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(self.pythonpath), env.get("PYTHONPATH"))))
        if self.clock_file is not None:
            if not self.clock_file.exists():
                self.clock_file.write_text("+0\n")
            env.update(LD_PRELOAD=LIBFAKETIME, FAKETIME_TIMESTAMP_FILE=str(self.clock_file),
                       FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_CACHE_DURATION="1")
        return env

    def start(self, timeout: float = 120.0) -> None:
        """Start (or restart) the server and return once it serves."""
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        seen = len(self.log_text())
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env())
        self.starts += 1

        def serving() -> bool:
            text = self.log_text()[seen:]
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{text[-4000:]}")
            m = _LISTENING.search(text)
            if m and not self.netns:
                self.port = int(m.group(2))
            elif self.netns:
                self.port = NS_PORT
            return bool(_SERVING.search(text))

        wait_until(serving, f"{self.name} to serve (log {self.log_path})", timeout)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, sig)

    def dump_stack(self) -> Path | None:
        """Where a running process is stuck, written beside its log (``<name>.stack.txt``):
        each thread's kernel wait (/proc), and its Python stacks by ``py-spy dump`` when that
        is installed (it cannot read a stopped process)."""
        if not self.running:
            return None
        assert self.proc is not None
        pid = self.proc.pid
        text = f"pid {pid}\neach thread's kernel wait (/proc/{pid}/task/*/wchan):\n"
        for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
            try:
                text += f"  {task.name} {(task / 'comm').read_text().strip()}: {(task / 'wchan').read_text()}\n"
            except OSError as e:
                text += f"  {task.name}: {e}\n"
        spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
        if spy is not None:
            r = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
            text += r.stdout + r.stderr
        out = self.log_path.with_name(f"{self.name}.stack.txt")
        out.write_text(text)
        return out

    def kill9(self) -> None:
        if self.proc is not None:
            self.signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM (after a SIGCONT, should it be paused); SIGKILL if it does not stop."""
        if self.proc is None or not self.running:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill9()


class Cluster:
    """One server (``single``) or a primary ``p`` and its sync standby ``s`` (``standby``), on
    a ``net`` (namespaces or relays) when partitions are wanted, else on plain loopback.

    ``flags`` go to every node (a durability, say); the primary of ``standby`` also gets
    ``--sync-standbys 1`` unless ``sync`` is 0. ``disk`` names nodes whose data directory is a
    tmpfs of that many MiB (mounted here, unmounted by ``close``), for the full-disk fault.
    """

    def __init__(self, root: Path, topology: str = "single", *, flags: tuple[str, ...] = (),
                 net: Any = None, sync: int = 1, clock: bool = False,
                 disk: dict[str, int] | None = None) -> None:
        self.root, self.topology, self.net = root, topology, net
        names = ["p"] if topology == "single" else ["p", "s"]
        self.nodes: dict[str, Node] = {}
        self.mounts: list[Path] = []
        secret = root / "replication.secret"  # what a standby proves to replicate (docs/standby.md)
        if topology != "single" and not secret.exists():
            root.mkdir(parents=True, exist_ok=True)
            secret.write_text(os.urandom(24).hex() + "\n")
            secret.chmod(0o600)
        for n in names:
            d = root / n / "data"
            d.mkdir(parents=True, exist_ok=True)
            if disk and n in disk:
                _mount_tmpfs(d, disk[n])
                self.mounts.append(d)
            node_flags = ["-s", "1048576", *flags]
            if topology == "standby" and sync:  # the standby's counts once it is promoted
                node_flags += ["--sync-standbys", str(sync)]
            if topology != "single":
                node_flags += ["--replication-secret", str(secret)]
            self.nodes[n] = Node(n, d, node_flags, netns=net.netns(n) if net else None,
                                 listen=net.listen_on(n) if net else "127.0.0.1",
                                 clock_file=root / n / "clock" if clock else None)
        self.primary = "p"

    def start(self) -> None:
        self.nodes["p"].start()
        if "s" in self.nodes:
            self.follow("s", "p")
            self.nodes["s"].start()

    def follow(self, name: str, primary: str) -> None:
        """Make node ``name``'s next start a standby of ``primary``."""
        node, p = self.nodes[name], self.nodes[primary]
        of = self.net.peer_address(primary, p.port, name) if self.net else p.address
        i = node.flags.index("--standby-of") if "--standby-of" in node.flags else len(node.flags)
        node.flags = [*node.flags[:i], *node.flags[i + 2:], "--standby-of", of]

    def stats(self, name: str, timeout: float = 5.0) -> dict[str, str]:
        from stalkd.client import Client

        with Client(self.client_address(name), timeout=timeout) as c:
            return {k: str(v) for k, v in c.stats().items()}

    def caught_up(self) -> bool:
        """The primary has a standby that holds every record it wrote."""
        try:
            st = self.stats(self.primary)
        except (OSError, ValueError):
            return False
        return int(st.get("standbys", 0)) >= 1 and int(st.get("standby-lag", 1)) == 0

    def states(self) -> str:
        """Each node's process: running, or how it exited; its last log line; and, for a
        running one, where its stack was dumped (``Node.dump_stack``)."""
        said = []
        for n, node in self.nodes.items():
            state = ("running" if node.running else f"exited with {node.proc.returncode}"
                     if node.proc is not None else "never started")
            stack = node.dump_stack()
            lines = node.log_text().rstrip().splitlines()
            said.append(f"{n}: {state}" + (f", stack in {stack}" if stack else "")
                        + (f", last said: {lines[-1]}" if lines else ""))
        return "; ".join(said)

    def promote(self, name: str) -> None:
        """SIGUSR2 to standby ``name`` until it says it is primary (docs/standby.md)."""

        def promoted() -> bool:
            try:
                if self.stats(name).get("role") == "primary":
                    return True
            except OSError:
                pass
            self.nodes[name].signal(signal.SIGUSR2)
            return False

        wait_until(promoted, f"the promotion of {name}")
        self.primary = name

    def targets(self) -> list[str]:
        """The nodes a fault may hit: any of them (the ha topology names its primary alone)."""
        return sorted(self.nodes)

    def watch(self, history: Any) -> None:
        """Record promotions the cluster makes by itself into ``history`` (the ha topology's);
        here the harness promotes, and its nemesis records them."""

    def cut_etcd(self, name: str) -> None:
        raise ValueError(f"the {self.topology} topology has no etcd")

    def heal_etcd(self, name: str) -> None:
        raise ValueError(f"the {self.topology} topology has no etcd")

    def client_address(self, name: str) -> str:
        node = self.nodes[name]
        return self.net.client_address(name, node.port) if self.net else node.address

    def addresses(self) -> list[str]:
        return [self.client_address(n) for n in self.nodes]

    def node_names(self) -> dict[str, str]:
        """Client address -> node name (what the history's ``node`` says)."""
        return {self.client_address(n): n for n in self.nodes}

    def revive(self) -> None:
        """Every fault undone: the network healed, paused nodes continued, dead ones restarted."""
        if self.net is not None:
            self.net.heal()
        for node in self.nodes.values():
            if node.running:
                node.signal(signal.SIGCONT)
            else:
                node.start()

    def close(self) -> None:
        for node in self.nodes.values():
            node.stop()
        if self.net is not None:
            self.net.close()
        for m in self.mounts:
            subprocess.run(["umount", "-l", str(m)], check=False, timeout=30)
        self.mounts = []


def _mount_tmpfs(d: Path, mib: int) -> None:
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0700", "tmpfs", str(d)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise OSError(f"cannot mount a {mib} MiB tmpfs on {d}: {r.stderr.strip()}")
