"""Records nothing waits for (a reserve's, a touch's, a timeout's) do not make a WAL write of
their own (barriers.py): they go out with the next batch holding a durable record, at the latest
``LAZY_WRITE`` later, before a stop's last sync and before a snapshot; and at once while a
standby streams, since it learns reservations from them. A real WAL on a temporary directory and
the real event loop; the transport only records."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from tests.server.test_conn import RecordingTransport

from stalkd.engine.model import Op, decode
from stalkd.persist.wal import Wal
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.connection import Connection

PUT = b"put 0 0 60 2\r\nhi\r\n"
DEADLINE = 10.0  # seconds a wait for the lazy timer may take on a loaded machine (a bound, not a figure)


def _ops(wal: Wal) -> list[Op]:
    return [decode(f.payload).op for f in wal.log.read(0)]


async def _iterations(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _until(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.005)


def _run(tmp_path: os.PathLike[str], scenario: Callable[[Server, Wal, Connection, RecordingTransport], object]) -> None:
    d = os.fspath(tmp_path)

    async def main() -> None:
        wal = Wal.open(d, durability="never")
        engine, _ = wal.recover(time.time())
        srv = Server(Config(data_dir=d, durability="never"), engine, wal)
        c = srv.new_connection()
        t = RecordingTransport()
        c.connection_made(t)  # type: ignore[arg-type]
        try:
            await scenario(srv, wal, c, t)  # type: ignore[misc]
        finally:
            srv.barriers.stop()
            wal.close()

    asyncio.run(main())


def test_a_reserve_is_written_with_the_delete_that_follows_it(tmp_path: os.PathLike[str]) -> None:
    async def scenario(srv: Server, wal: Wal, c: Connection, t: RecordingTransport) -> None:
        c.data_received(PUT)
        await _iterations()
        assert _ops(wal) == [Op.PUT]
        # When a job is reserved, its reply goes out while its record waits
        c.data_received(b"reserve\r\n")
        await _iterations()
        assert b"RESERVED 1 2\r\nhi\r\n" in b"".join(t.sent)
        assert _ops(wal) == [Op.PUT] and srv.barriers.pending
        # Then the delete's batch takes it along, in the order the engine made them
        c.data_received(b"delete 1\r\n")
        await _iterations()
        assert b"".join(t.sent).endswith(b"DELETED\r\n")
        assert _ops(wal) == [Op.PUT, Op.RESERVE, Op.DELETE] and not srv.barriers.pending

    _run(tmp_path, scenario)


def test_a_reserve_nothing_follows_is_written_by_the_timer(tmp_path: os.PathLike[str]) -> None:
    async def scenario(srv: Server, wal: Wal, c: Connection, t: RecordingTransport) -> None:
        c.data_received(PUT + b"reserve\r\n")  # (one step: the put's batch takes the reserve along)
        await _iterations()
        assert b"RESERVED 1 2" in b"".join(t.sent) and _ops(wal) == [Op.PUT, Op.RESERVE]
        c.data_received(b"release 1 0 0\r\n")
        await _iterations()
        written = _ops(wal)
        c.data_received(b"reserve\r\n")
        await _iterations()
        c.data_received(b"touch 1\r\n")
        await _iterations()
        assert b"".join(t.sent).endswith(b"TOUCHED\r\n")
        assert _ops(wal) == written
        # Then, with nothing else written, both go out LAZY_WRITE later
        await _until(lambda: not srv.barriers.pending)
        assert _ops(wal) == [*written, Op.RESERVE, Op.TOUCH]
        assert wal.last_seq == srv.engine.seq

    _run(tmp_path, scenario)


def test_what_waits_is_written_before_a_stop_and_before_a_snapshot(tmp_path: os.PathLike[str]) -> None:
    async def scenario(srv: Server, wal: Wal, c: Connection, t: RecordingTransport) -> None:
        c.data_received(PUT + PUT)
        await _iterations()
        c.data_received(b"reserve\r\n")
        await _iterations()
        assert _ops(wal) == [Op.PUT, Op.PUT] and wal.last_seq < srv.engine.seq
        # A snapshot needs every record written: maintenance writes what waits first
        srv.barriers.write_pending()
        assert _ops(wal) == [Op.PUT, Op.PUT, Op.RESERVE] and wal.last_seq == srv.engine.seq
        c.data_received(b"reserve\r\n")
        await _iterations()
        assert _ops(wal) == [Op.PUT, Op.PUT, Op.RESERVE]
        # A stop's last wait writes it too
        assert await srv.wait_durable(DEADLINE)
        assert _ops(wal) == [Op.PUT, Op.PUT, Op.RESERVE, Op.RESERVE]

    _run(tmp_path, scenario)


def test_a_reserve_is_written_at_once_while_a_standby_streams(tmp_path: os.PathLike[str]) -> None:
    async def scenario(srv: Server, wal: Wal, c: Connection, t: RecordingTransport) -> None:
        shipped: list[int] = []
        b = srv.barriers
        b.after_write = lambda: shipped.append(wal.log.next_offset)
        b.after_write_while = {"a standby"}  # (Replicas.senders: who it streams to)
        c.data_received(PUT)
        await _iterations()
        c.data_received(b"reserve\r\n")
        await _iterations()
        # Then the reserve's record went out in a batch of its own, and was shipped
        assert _ops(wal) == [Op.PUT, Op.RESERVE] and shipped == [1, 2]
        # When no standby streams any more, the next one waits again
        b.after_write_while = set()
        c.data_received(b"release 1 0 0\r\n")
        await _iterations()
        written = _ops(wal)
        c.data_received(b"reserve\r\n")
        await _iterations()
        assert b"".join(t.sent).endswith(b"RESERVED 1 2\r\nhi\r\n")
        assert _ops(wal) == written and b.pending

    _run(tmp_path, scenario)
