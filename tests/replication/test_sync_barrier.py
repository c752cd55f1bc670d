"""``--sync-standbys``, in process: a real WAL and server whose barrier has a ``SyncGate``; the
test plays the standby's acknowledgements, so it decides when N standbys hold a batch."""

from __future__ import annotations

import asyncio
import os
import time

from stalkd.persist.wal import Wal
from stalkd.replication.gate import SyncGate
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.listen import bind_listener


async def _nothing_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        await asyncio.wait_for(reader.read(1), seconds)
    except TimeoutError:
        return True
    return False


def test_replies_wait_for_the_standbys_acknowledgement(tmp_path: os.PathLike[str]) -> None:
    async def main() -> None:
        wal = Wal.open(tmp_path, durability="always")
        engine, _ = wal.recover(time.time())
        srv = Server(Config(data_dir=os.fspath(tmp_path)), engine, wal)
        gate = SyncGate(1)
        srv.barriers.gate = gate
        srv.barriers.end_offset = lambda: wal.log.next_offset
        sock = bind_listener("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(srv.new_connection, sock=sock)
        try:
            r, w = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            # Given 20 pipelined puts, durable here, that no standby has acknowledged
            w.write(b"".join(b"put 0 0 60 2\r\nj%d\r\n" % (i % 10) for i in range(20)))
            deadline = time.monotonic() + 10
            while srv.barriers.local_durable < srv.barriers.written or wal.log.next_offset < 20:
                assert time.monotonic() < deadline, "the puts never became durable locally"
                await asyncio.sleep(0.005)
            # Then no INSERTED leaves
            assert await _nothing_within(r, 0.3)
            # When it holds all of them, every reply leaves, in order
            gate.ack("standby", wal.log.next_offset)
            srv.barriers.replicated()
            got = [await asyncio.wait_for(r.readline(), 5) for _ in range(20)]
            assert got == [b"INSERTED %d\r\n" % i for i in range(1, 21)]
            assert srv.durable == srv.written
            w.close()
        finally:
            server.close()
            srv.begin_stop()
            srv.finish_stop()
            wal.close()

    asyncio.run(main())
