"""A former primary rejoins its cluster after a failover (issue 29's failover campaign: the old
primary, restarted, stayed out of the cluster).

A server whose directory was promoted, restarted with ``--standby-of`` the node promoted after
it, stays primary until that node proves the newer epoch; it then starts again in the same
process (exec) as that node's standby and catches up. Real processes: a primary ``a`` and its
standby ``b``; ``b`` promoted, ``a`` made its standby, ``a`` promoted, then ``b`` restarted as
the campaign restarts it. Also: the server's last turn ends every task it still has, even one
that a cancellation missed, and a failed exec ends the process with its own status and a line
saying why, never silently."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import stalkd
from stalkd.node.serve import EXIT_REJOIN_FAILED, _end_tasks
from support import listening_ports, wait_until

from .cluster import WAL_SIZE, Relay, caught_up, promote_by_signal, secret_file, stats, until

SERVING = re.compile(r"serving \d+ ms after start")  # serve.py's line once a start serves


class Node:
    """``python -m stalkd.node.cli`` on a UNIX socket (``unix``) or on 127.0.0.1 port 0, its
    log appended to ``<name>.log`` across restarts."""

    def __init__(self, tmp: Path, name: str, unix: bool) -> None:
        self.dir = tmp / name
        self.log = tmp / f"{name}.log"
        self.sock = tmp / f"{name}.sock" if unix else None
        self.host, self.port = "127.0.0.1", 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"unix:{self.sock}" if self.sock is not None else f"{self.host}:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self, *flags: str, python: str = sys.executable, env: dict[str, str] | None = None) -> None:
        listen = ["-l", f"unix:{self.sock}"] if self.sock is not None else ["-l", "127.0.0.1", "-p", "0"]
        cmd = [python, "-m", "stalkd.node.cli", *listen, "--dir", str(self.dir), "-s", WAL_SIZE,
               "--replication-secret", secret_file(self.dir), *flags]  # fmt: skip
        seen = len(SERVING.findall(self.log_text()))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        proc = self.proc

        def serving() -> bool:
            assert proc.poll() is None, f"exited with {proc.returncode}:\n{self.log_text()}"
            return len(SERVING.findall(self.log_text())) > seen

        wait_until(serving, f"{self.dir.name} to serve", timeout=120)
        if self.sock is None:
            self.port = listening_ports(proc.pid)[0]

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"{self.dir.name} did not stop on SIGTERM:\n{self.log_text()}") from None


def _put(n: Node, body: bytes) -> int:
    with stalkd.Client(n.address) as c:
        return c.put(body)


def _superseded(a: Node, b: Node, relay: list[Relay]) -> int:
    """``a`` primary, ``b`` its standby; ``b`` promoted (epoch 1), ``a`` made its standby, ``a``
    promoted (epoch 2), ``b`` killed: its directory stays primary on its next start. For TCP,
    ``a`` reaches ``b`` through a relay (appended to ``relay``): ``b`` gets another port when
    it starts again. Returns the id of the job put first."""
    a.start()
    b.start("--standby-of", a.address)
    first = _put(a, b"epoch 0")
    until(lambda: caught_up(a, b), "b to follow a")
    a.kill9()
    promote_by_signal(b)
    if b.sock is None:  # a tells b's address of its epoch: the same across b's restart
        relay.append(Relay(b))
    a.start("--standby-of", relay[0].address if relay else b.address)
    _put(b, b"epoch 1")
    until(lambda: caught_up(b, a), "a to follow b")
    b.kill9()
    promote_by_signal(a)
    assert stats(a)["epoch"] == 2
    return first


@pytest.mark.parametrize("listener", ["tcp", "unix"])
def test_a_superseded_primary_comes_back_as_a_standby_and_catches_up(tmp_path: Path, listener: str) -> None:
    """The campaign's restart of the old primary, with a plain listener (handed to the next
    start) and with only a UNIX socket (the next start makes it again)."""
    a, b = Node(tmp_path, "a", listener == "unix"), Node(tmp_path, "b", listener == "unix")
    relay: list[Relay] = []
    try:
        first = _superseded(a, b, relay)
        b.start("--standby-of", a.address)  # as the campaign restarts it: it stays primary ...
        if relay:
            relay[0].target = (b.host, b.port)
        proc = b.proc
        assert proc is not None
        # ... until a proves epoch 2; then it starts again, as a's standby, in the same process
        wait_until(lambda: len(SERVING.findall(b.log_text())) >= 3 or proc.poll() is not None,
                   "b to start again once fenced", timeout=60)
        log = b.log_text()
        assert proc.poll() is None, f"b exited with {proc.returncode}:\n{log}"
        assert "fenced by epoch 2: serving again as the standby of" in log
        assert "starting again (exec) to rejoin" in log and "stopped (exit 75)" not in log
        last = _put(a, b"after the rejoin")
        until(lambda: caught_up(a, b), "b to catch up with a", timeout=60)
        assert stats(b)["role"] == "standby"
        with stalkd.Client(b.address) as c:  # the first epoch's job and the last, read from b
            assert c.peek(first).body == b"epoch 0"
            assert c.peek(last).body == b"after the rejoin"
        assert b.proc is proc and proc.poll() is None
    finally:
        for n in (a, b):
            n.stop()
        for r in relay:
            r.close()


def test_a_rejoin_whose_exec_fails_says_so_and_exits_with_its_own_status(tmp_path: Path) -> None:
    """The interpreter that started the server is gone when it must start again (an upgrade
    removed it, say): the process ends with EXIT_REJOIN_FAILED and a line naming the exec."""
    a, b = Node(tmp_path, "a", True), Node(tmp_path, "b", True)
    gone = tmp_path / "bin" / "python"
    gone.parent.mkdir()
    gone.symlink_to(os.path.realpath(sys.executable))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        _superseded(a, b, [])
        b.start("--standby-of", a.address, python=str(gone), env=env)
        gone.unlink()  # running already: only its exec needs the file
        proc = b.proc
        assert proc is not None
        wait_until(lambda: proc.poll() is not None, "b to exit once its exec failed", timeout=60)
        log = b.log_text()
        assert proc.returncode == EXIT_REJOIN_FAILED, log
        assert f"cannot start again to rejoin: exec {gone}: FileNotFoundError" in log
    finally:
        for n in (a, b):
            n.stop()


def test_the_last_turn_ends_a_task_that_missed_its_cancellation() -> None:
    """On Python 3.11 ``wait_for`` drops a cancellation that arrives in the turn its awaited
    call completes; such a task goes on (the replication fence did, every second, and the
    runner's close waited for it). ``_end_tasks`` cancels it again; one that never ends is
    returned after the bound, for the server to exit without it."""

    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue()

        async def reads() -> None:  # the fence's shape: ask, then wait a while, for ever
            while True:
                await asyncio.wait_for(queue.get(), 10)
                await asyncio.sleep(0.01)

        task = asyncio.create_task(reads())
        await asyncio.sleep(0)
        queue.put_nowait(1)  # the read completes ...
        task.cancel()  # ... in the turn the cancellation arrives
        await asyncio.sleep(0.05)
        if sys.version_info < (3, 12):
            assert not task.done()  # the case this is about, as 3.11 has it
        assert await _end_tasks(5.0) == []
        assert task.done()

        release = asyncio.Event()

        async def ends_when_released() -> None:  # deaf to cancellations until then
            while not release.is_set():
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    continue

        stuck = asyncio.create_task(ends_when_released())
        await asyncio.sleep(0)  # in its loop
        assert await _end_tasks(0.3) == [stuck]
        release.set()
        await stuck

    asyncio.run(main())
