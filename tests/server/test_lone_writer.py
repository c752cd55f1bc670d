"""A lone writer's batch under ``never``: written at the end of its own step (its reply leaves
in the same read callback), while several writers still share one write a loop iteration later.
A real WAL on a temporary directory and the real event loop; the transport only records."""

from __future__ import annotations

import asyncio
import os
import time

from tests.server.test_conn import RecordingTransport

from stalkd.persist.wal import Wal
from stalkd.server.app import Server
from stalkd.server.barriers import INLINE_AFTER
from stalkd.server.config import Config

PUT = b"put 0 0 60 2\r\nhi\r\n"


def test_a_lone_never_writer_is_written_and_answered_within_its_step(tmp_path: os.PathLike[str]) -> None:
    d = os.fspath(tmp_path)

    async def main() -> None:
        wal = Wal.open(d, durability="never")
        engine, _ = wal.recover(time.time())
        srv = Server(Config(data_dir=d, durability="never"), engine, wal)
        c1, c2 = srv.new_connection(), srv.new_connection()
        t1, t2 = RecordingTransport(), RecordingTransport()
        c1.connection_made(t1)  # type: ignore[arg-type]
        c2.connection_made(t2)  # type: ignore[arg-type]
        try:
            # Given one connection writing alone, one put per read
            for i in range(INLINE_AFTER + 3):
                c1.data_received(PUT)
                if i >= INLINE_AFTER:
                    # Then its record is in the log and its reply sent before the loop runs again
                    assert wal.log.next_offset == i + 1
                    assert b"".join(t1.sent).count(b"INSERTED") == i + 1
                await asyncio.sleep(0)
            # When a second connection writes, its batch waits for the next loop iteration
            c2.data_received(PUT)
            c1.data_received(PUT)
            assert t2.sent == [] and wal.log.next_offset == INLINE_AFTER + 3
            await asyncio.sleep(0)
            # Then both records went out in one write, and only then both replies
            assert wal.log.next_offset == INLINE_AFTER + 5
            assert b"INSERTED" in b"".join(t2.sent)
            assert b"".join(t1.sent).count(b"INSERTED") == INLINE_AFTER + 4
        finally:
            wal.close()

    asyncio.run(main())
