"""A read that comes while the standby's stream waits for one is taken in the feed's own call
(``_Feed`` with the receiver as its sink): appended and applied before that call returns; a read
of more than one slice is left to the stream's task, which a promotion stops before it appends
any of it; a bad message there ends the stream (the task raises it) with nothing of it written."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import cast

import pytest

from stalkd.engine.handover import epoch_record
from stalkd.engine.model import Op, decode
from stalkd.persist.wal import Wal
from stalkd.replication import receiver, wire
from stalkd.replication.receiver import _Feed

from .streams import Acks, put_payload, standby, until


async def _waiting(rc: receiver.Receiver, feed: _Feed, acks: Acks) -> asyncio.Task[None]:
    """The stream's task, started and waiting for its first read."""
    task = asyncio.ensure_future(rc._stream(feed, cast(asyncio.StreamWriter, acks), wire.RecordDecoder(), [0.0]))
    await until(lambda: feed._waiter is not None, "the stream waiting for a read")
    return task


def test_a_read_that_comes_while_the_stream_waits_is_appended_and_applied_in_the_feeds_call(tmp_path: Path) -> None:
    with Wal.open(tmp_path, durability="always") as wal:
        rc = standby(wal, 1)  # (never connects: its reads are fed to it below)
        acks = Acks()

        async def main() -> None:
            feed = _Feed(cast(asyncio.BaseTransport, None), 1 << 20, b"")
            task = await _waiting(rc, feed, acks)
            for i in range(3):
                feed.data_received(b"".join(wire.encode_records(i, [put_payload(i + 1)])))
                assert wal.log.next_offset == i + 1  # (before the loop turns)
                assert sorted(rc.engine.jobs) == list(range(1, i + 2))
                await until(lambda i=i: rc.durable_end == i + 1, f"read {i} acknowledged")  # type: ignore[misc]
            rc.stop()
            feed.connection_lost(None)
            with contextlib.suppress(EOFError):
                await task

        asyncio.run(main())
        assert acks.sent == [1, 2, 3]


def test_a_read_of_more_slices_is_left_to_the_task_and_a_promotion_before_it_runs_appends_none_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(receiver, "APPLY_RECORDS", 2)
    with Wal.open(tmp_path, durability="always") as wal:
        rc = standby(wal, 1)
        acks = Acks()

        async def main() -> None:
            feed = _Feed(cast(asyncio.BaseTransport, None), 1 << 20, b"")
            task = await _waiting(rc, feed, acks)
            feed.data_received(b"".join(wire.encode_records(0, [put_payload(1), put_payload(2), put_payload(3)])))
            assert wal.log.next_offset == 0  # two slices: the task's, at its next turn
            rc.stop()  # what Standby.promote does first, then its epoch's record
            wal.write([epoch_record(rc.engine, 1, wal.log.next_offset, 6.0)])
            wal.sync()
            await task

        asyncio.run(main())
        assert [decode(f.payload).op for f in wal.log.read(0)] == [Op.EPOCH]
        assert not rc.engine.jobs


def test_a_bad_message_that_comes_while_the_stream_waits_ends_the_stream_with_nothing_of_it_written(
        tmp_path: Path) -> None:  # fmt: skip
    with Wal.open(tmp_path, durability="always") as wal:
        rc = standby(wal, 1)
        acks = Acks()

        async def main() -> None:
            feed = _Feed(cast(asyncio.BaseTransport, None), 1 << 20, b"")
            task = await _waiting(rc, feed, acks)
            feed.data_received(b"".join(wire.encode_records(0, [put_payload(1)])))
            feed.data_received(b"".join(wire.encode_records(5, [put_payload(2)])))  # (the transport's call does not raise)
            feed.data_received(b"".join(wire.encode_records(1, [put_payload(3)])))  # after the error: never read
            with pytest.raises(wire.WireError, match="sent offset 5"):
                await task

        asyncio.run(main())
        assert wal.log.next_offset == 1
        assert sorted(rc.engine.jobs) == [1]
