"""Group commit, in process: a real WAL on a temporary directory whose ``sync`` is held at a
gate, so the test decides when the fsync "finishes" and can look at the wire meanwhile."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence

import pytest

from stalkd.engine import Engine
from stalkd.engine.model import Record
from stalkd.persist.wal import Wal
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.listen import bind_listener
from stalkd.server.syncpolicy import SyncPolicy


class GatedWal:
    """The real WAL; ``sync`` waits for ``gate`` (or fails when ``fail`` is set)."""

    persistent = True

    def __init__(self, wal: Wal) -> None:
        self.wal = wal
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail = False
        self.syncs = 0

    def admit(self, cost: int) -> bool:
        return self.wal.admit(cost)

    def admit_upto(self, n: int, unit: int) -> int:
        return self.wal.admit_upto(n, unit)

    def settle(self, admitted: int, records: Sequence[Record]) -> None:
        self.wal.settle(admitted, records)

    def write(self, records: Sequence[Record]) -> None:
        self.wal.write(records)

    def sync(self) -> None:
        self.entered.set()
        assert self.gate.wait(30), "test never opened the gate"
        if self.fail:
            raise OSError(5, "Input/output error (injected)")
        self.wal.sync()
        self.syncs += 1

    def maintain(self, engine: Engine, now: float) -> bool:
        return self.wal.maintain(engine, now)

    def stats(self) -> dict[str, int]:
        return self.wal.stats()

    def close(self) -> None:
        self.wal.close()


async def _until(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition never became true"
        await asyncio.sleep(0.005)


async def _nothing_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        await asyncio.wait_for(reader.read(1), seconds)
    except TimeoutError:
        return True
    return False


def _run(tmp: str, scenario: object) -> None:
    async def main() -> None:
        wal = Wal.open(tmp, durability="always")
        engine, _ = wal.recover(time.time())
        gated = GatedWal(wal)
        fatal: list[BaseException] = []
        srv = Server(Config(data_dir=tmp), engine, gated, on_fatal=fatal.append)
        # These scenarios hold a sync on the sync thread while the loop serves; on a disk whose
        # fsync is near-instant (tmpfs) the policy would move it inline and block the loop.
        srv.barriers.sync_policy = SyncPolicy(max_inline=0.0)
        sock = bind_listener("127.0.0.1", 0)
        port = sock.getsockname()[1]
        server = await asyncio.get_running_loop().create_server(srv.new_connection, sock=sock)
        try:
            await scenario(srv, gated, port, fatal)  # type: ignore[operator]
        finally:
            gated.gate.set()
            server.close()
            srv.begin_stop()
            srv.finish_stop()
            wal.close()

    asyncio.run(main())


def test_replies_wait_for_the_fsync_while_the_loop_keeps_serving(tmp_path: os.PathLike[str]) -> None:
    async def scenario(srv: Server, gated: GatedWal, port: int, fatal: list[BaseException]) -> None:
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        # Given 50 puts pipelined in one packet while the fsync is held
        w1.write(b"".join(b"put 0 0 60 3\r\nj%02d\r\n" % i for i in range(50)))
        await _until(gated.entered.is_set)
        # Then no INSERTED is sent before the records are durable ...
        assert await _nothing_within(r1, 0.3)
        # ... while the loop keeps reading and answering commands that need no disk ...
        w2.write(b"list-tube-used\r\nstats-job 1\r\n")
        assert await asyncio.wait_for(r2.readline(), 5) == b"USING default\r\n"
        assert (await asyncio.wait_for(r2.readline(), 5)).startswith(b"OK ")
        await asyncio.wait_for(r2.readuntil(b"\n\r\n"), 5)  # the YAML body
        # ... but a job body is not shown before its put is durable
        w2.write(b"peek 1\r\n")
        assert await _nothing_within(r2, 0.3)
        # When the fsync completes
        gated.gate.set()
        got = [await asyncio.wait_for(r1.readline(), 5) for _ in range(50)]
        assert got == [b"INSERTED %d\r\n" % i for i in range(1, 51)]
        assert await asyncio.wait_for(r2.readline(), 5) == b"FOUND 1 3\r\n"
        # and all 50 records shared a handful of fsyncs, not one each
        assert 1 <= gated.syncs <= 3
        assert srv.durable == srv.written
        assert not fatal
        w1.close()
        w2.close()

    _run(os.fspath(tmp_path), scenario)


def test_an_fsync_failure_never_acknowledges_and_stops_the_server(tmp_path: os.PathLike[str]) -> None:
    async def scenario(srv: Server, gated: GatedWal, port: int, fatal: list[BaseException]) -> None:
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        w1.write(b"put 0 0 60 1\r\nx\r\n")
        await _until(gated.entered.is_set)
        gated.fail = True
        gated.gate.set()
        # The connection is closed without INSERTED, and the server reports the failure
        assert await asyncio.wait_for(r1.read(), 5) == b""
        await _until(lambda: bool(fatal))
        assert "WAL sync failed" in str(fatal[0]) and "injected" in str(fatal[0])
        assert srv.durable == 0

    _run(os.fspath(tmp_path), scenario)


@pytest.mark.parametrize("n_conns", [8])
def test_many_connections_share_group_commits(tmp_path: os.PathLike[str], n_conns: int) -> None:
    async def scenario(srv: Server, gated: GatedWal, port: int, fatal: list[BaseException]) -> None:
        gated.gate.set()  # syncs run freely
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(n_conns)]

        async def producer(r: asyncio.StreamReader, w: asyncio.StreamWriter, k: int) -> list[bytes]:
            out = []
            for i in range(40):  # one put at a time: each waits for its own acknowledgement
                w.write(b"put 0 0 60 2\r\n%02d\r\n" % (i % 100))
                out.append(await asyncio.wait_for(r.readline(), 10))
            return out

        results = await asyncio.gather(*(producer(r, w, k) for k, (r, w) in enumerate(conns)))
        replies = [line for rs in results for line in rs]
        assert all(line.startswith(b"INSERTED ") for line in replies)
        assert len({line for line in replies}) == n_conns * 40  # every id distinct
        # Concurrent producers were grouped: fewer fsyncs than acknowledged puts
        assert gated.syncs < n_conns * 40
        for _, w in conns:
            w.close()

    _run(os.fspath(tmp_path), scenario)


def test_a_durable_job_is_shown_while_another_connections_put_waits_for_its_fsync(
    tmp_path: os.PathLike[str],
) -> None:
    async def scenario(srv: Server, gated: GatedWal, port: int, fatal: list[BaseException]) -> None:
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        r3, w3 = await asyncio.open_connection("127.0.0.1", port)
        # Given job 1 acknowledged (durable)
        gated.gate.set()
        w1.write(b"put 0 0 60 3\r\none\r\n")
        assert await asyncio.wait_for(r1.readline(), 5) == b"INSERTED 1\r\n"
        # When another connection's put waits for its fsync
        gated.gate.clear()
        gated.entered.clear()
        w2.write(b"put 0 0 60 3\r\ntwo\r\n")
        await _until(gated.entered.is_set)
        # Then job 1 is shown at once, job 2 (its put not durable yet) is not
        w3.write(b"peek 1\r\n")
        assert await asyncio.wait_for(r3.readline(), 5) == b"FOUND 1 3\r\n"
        assert await asyncio.wait_for(r3.readline(), 5) == b"one\r\n"
        w3.write(b"peek 2\r\n")
        assert await _nothing_within(r3, 0.3)
        assert await _nothing_within(r2, 0.1)
        # When the fsync completes, both follow
        gated.gate.set()
        assert await asyncio.wait_for(r2.readline(), 5) == b"INSERTED 2\r\n"
        assert await asyncio.wait_for(r3.readline(), 5) == b"FOUND 2 3\r\n"
        assert fatal == []

    _run(os.fspath(tmp_path), scenario)
