"""Where the ``always`` fsync runs: inline for a lone writer, on the sync thread once several
connections write. A real WAL on a temporary directory, wrapped to record which thread ran each
sync and how many put records were durable at that point."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence

from stalkd.engine import Engine
from stalkd.engine.model import Op, Record
from stalkd.persist.wal import Wal
from stalkd.server.app import Server
from stalkd.server.barriers import INLINE_AFTER
from stalkd.server.config import Config
from stalkd.server.listen import bind_listener
from stalkd.server.syncpolicy import SyncPolicy


class WatchedWal:
    """The real WAL; remembers the thread of every sync and the puts each one covered."""

    persistent = True

    def __init__(self, wal: Wal) -> None:
        self.wal = wal
        self.puts_written = 0
        self.puts_durable = 0
        self.sync_threads: list[int] = []
        self.fail_at: int | None = None  # the sync with this number raises EIO

    def admit(self, cost: int) -> bool:
        return self.wal.admit(cost)

    def admit_upto(self, n: int, unit: int) -> int:
        return self.wal.admit_upto(n, unit)

    def settle(self, admitted: int, records: Sequence[Record]) -> None:
        self.wal.settle(admitted, records)

    def write(self, records: Sequence[Record]) -> None:
        self.wal.write(records)
        self.puts_written += sum(1 for r in records if r.op is Op.PUT)

    def sync(self) -> None:
        if self.fail_at is not None and len(self.sync_threads) + 1 >= self.fail_at:
            self.sync_threads.append(threading.get_ident())
            raise OSError(5, "Input/output error (injected)")
        covered = self.puts_written
        self.wal.sync()
        self.sync_threads.append(threading.get_ident())
        self.puts_durable = max(self.puts_durable, covered)

    def maintain(self, engine: Engine, now: float) -> bool:
        return self.wal.maintain(engine, now)

    def stats(self) -> dict[str, int]:
        return self.wal.stats()

    def close(self) -> None:
        self.wal.close()


def _run(tmp: str, scenario: object, fatal: list[BaseException] | None = None,
         policy: SyncPolicy | None = None) -> None:
    async def main() -> None:
        wal = Wal.open(tmp, durability="always")
        engine, _ = wal.recover(time.time())
        watched = WatchedWal(wal)
        srv = Server(Config(data_dir=tmp), engine, watched,
                     on_fatal=fatal.append if fatal is not None else None)
        if policy is not None:
            srv.barriers.sync_policy = policy
        sock = bind_listener("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(srv.new_connection, sock=sock)
        try:
            await scenario(watched, sock.getsockname()[1])  # type: ignore[operator]
        finally:
            server.close()
            srv.begin_stop()
            srv.finish_stop()
            wal.close()

    asyncio.run(main())


async def _put_one_by_one(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int,
                          watched: WatchedWal) -> list[int]:
    """n puts, each waiting for its reply; checks every INSERTED came after its fsync."""
    ids = []
    for i in range(n):
        w.write(b"put 0 0 60 2\r\n%02d\r\n" % (i % 100))
        line = await asyncio.wait_for(r.readline(), 10)
        assert line.startswith(b"INSERTED "), line
        ids.append(int(line.split()[1]))
        # The reply left only after the put's record was fsynced (by either path).
        assert watched.puts_durable >= watched.puts_written
    return ids


def test_a_lone_writer_syncs_inline_and_a_second_writer_brings_the_thread_back(
    tmp_path: os.PathLike[str],
) -> None:
    loop_thread = threading.get_ident()

    async def scenario(watched: WatchedWal, port: int) -> None:
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        # Given one connection writing alone, one put per batch
        await _put_one_by_one(r1, w1, INLINE_AFTER + 5, watched)
        # Then its first fsyncs ran on the sync thread, the ones after INLINE_AFTER on the loop
        assert watched.sync_threads[0] != loop_thread
        assert watched.sync_threads[-4:] == [loop_thread] * 4
        # When a second connection writes too
        before = len(watched.sync_threads)
        await _put_one_by_one(r2, w2, 1, watched)
        await _put_one_by_one(r1, w1, 1, watched)
        # Then the fsyncs are back on the sync thread (the loop keeps serving meanwhile)
        assert all(t != loop_thread for t in watched.sync_threads[before:])
        # And every acknowledged put is in the WAL after a reopen-free check: stats agree
        w1.write(b"stats-tube default\r\n")
        head = await asyncio.wait_for(r1.readline(), 10)
        body = await asyncio.wait_for(r1.readexactly(int(head.split()[1]) + 2), 10)
        assert b"total-jobs: %d\n" % (INLINE_AFTER + 7) in body
        for w in (w1, w2):
            w.close()

    # Where several writers' fsyncs run is the policy's choice (next test); pinned to the
    # thread here: a policy that never finds an fsync short enough to run inline.
    _run(os.fspath(tmp_path), scenario, policy=SyncPolicy(max_inline=0.0))


def test_several_writers_sync_inline_when_the_handoff_costs_more_with_a_thread_probe(
    tmp_path: os.PathLike[str],
) -> None:
    loop_thread = threading.get_ident()
    # A policy that has measured a hand-off far dearer than any fsync here (1 s), bounded at
    # 10 s so that a slow CI disk does not change the choice; a thread probe every 4 syncs.
    policy = SyncPolicy(max_inline=10.0, probe_every=4)
    policy.thread_done(handoff=1.0, fsync=0.0)

    async def scenario(watched: WatchedWal, port: int) -> None:
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        # Given two connections writing in turn (never a lone writer)
        for _ in range(10):
            await _put_one_by_one(r1, w1, 1, watched)  # each INSERTED checked after its fsync
            await _put_one_by_one(r2, w2, 1, watched)
        # Then the fsyncs ran inline on the loop, except one thread probe per 4 inline ones
        threads = watched.sync_threads
        inline = [t == loop_thread for t in threads]
        assert sum(inline) >= 12, inline
        assert not all(inline), inline
        runs = "".join("i" if x else "t" for x in inline).split("t")
        assert max(len(run) for run in runs) <= 4, inline
        for w in (w1, w2):
            w.close()

    _run(os.fspath(tmp_path), scenario, policy=policy)


def test_inline_sync_keeps_every_acknowledged_put_across_a_restart(tmp_path: os.PathLike[str]) -> None:
    acked: list[int] = []

    async def scenario(watched: WatchedWal, port: int) -> None:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        acked.extend(await _put_one_by_one(r, w, INLINE_AFTER * 3, watched))
        w.close()

    _run(os.fspath(tmp_path), scenario)
    # Reopen the directory the way `stalkd serve` does: every acknowledged job is there.
    wal = Wal.open(os.fspath(tmp_path), durability="always")
    try:
        engine, info = wal.recover(time.time())
        assert info.jobs == len(acked)
        assert sorted(engine.jobs) == sorted(acked)
    finally:
        wal.close()


def test_an_inline_fsync_failure_acknowledges_nothing_and_stops_the_server(
    tmp_path: os.PathLike[str],
) -> None:
    loop_thread = threading.get_ident()
    fatal: list[BaseException] = []

    async def scenario(watched: WatchedWal, port: int) -> None:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        # Given a lone writer whose fsyncs now run inline
        await _put_one_by_one(r, w, INLINE_AFTER + 2, watched)
        assert watched.sync_threads[-1] == loop_thread
        # When the next fsync fails
        watched.fail_at = len(watched.sync_threads) + 1
        w.write(b"put 0 0 60 4\r\nlost\r\n")
        # Then the connection closes without INSERTED, and the server reports the failure
        assert await asyncio.wait_for(r.read(), 10) == b""
        assert watched.sync_threads[-1] == loop_thread
        assert len(fatal) == 1 and "WAL sync failed" in str(fatal[0])

    _run(os.fspath(tmp_path), scenario, fatal)
