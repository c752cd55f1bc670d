"""A standby promoted while it works through one read of its stream: the promotion takes effect
between two messages, every record appended is applied, and nothing of the old primary's stream
is appended after the new epoch's record (the receiver turns the loop between messages, so that
an fsync's acknowledgement goes out at once; a promotion can run in that turn)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

from stalkd.engine.handover import epoch_record
from stalkd.engine.model import Op, Record, decode, encode
from stalkd.persist.wal import Wal
from stalkd.replication import wire
from stalkd.replication.receiver import _Feed

from .streams import standby


class Acks:
    """The stream's writing half, as the receiver uses it (what it sends is the primary's)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def put(jid: int) -> bytes:
    return encode(Record(Op.PUT, jid, 5_000_000, jid, "t", 0, 0, 60, 0, b"job %d" % jid))


def test_a_promotion_between_two_messages_of_one_read_appends_nothing_after_its_epoch(tmp_path: Path) -> None:
    with Wal.open(tmp_path, durability="always") as wal:
        rc = standby(wal, 1)  # (never connects: its messages are fed to it below)
        engine = rc.engine
        acks = Acks()

        def promote() -> None:  # what Standby.promote does first, at the loop's next turn
            rc.stop()
            wal.write([epoch_record(engine, 1, wal.log.next_offset, 6.0)])
            wal.sync()

        async def main() -> None:
            # two messages, read at once (no transport: the feed stays far below its limit)
            feed = _Feed(cast(asyncio.BaseTransport, None), 1 << 20,
                         b"".join(wire.encode_records(0, [put(1), put(2)]))
                         + b"".join(wire.encode_records(2, [put(3)])))  # fmt: skip
            asyncio.get_running_loop().call_soon(promote)
            rc._writer = cast(asyncio.StreamWriter, acks)
            await rc._stream(feed, cast(asyncio.StreamWriter, acks), wire.RecordDecoder(), [0.0])

        asyncio.run(main())
        ops = [(decode(f.payload).op, decode(f.payload).job_id) for f in wal.log.read(0)]
        assert ops == [(Op.PUT, 1), (Op.PUT, 2), (Op.EPOCH, 0)]
        assert sorted(engine.jobs) == [1, 2]
