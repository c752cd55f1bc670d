"""A standby promoted while it works through one read of its stream: the promotion takes effect
between two slices of it, every record appended is applied, and nothing of the old primary's
stream is appended after the new epoch's record (the receiver turns the loop between slices of
at most ``APPLY_RECORDS`` records, and between messages that do not follow each other; a
promotion can run in that turn)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

from stalkd.engine.handover import epoch_record
from stalkd.engine.model import Op, decode
from stalkd.log.frame import encode_data_frames
from stalkd.persist.wal import Wal
from stalkd.replication import receiver, wire
from stalkd.replication.receiver import _Feed

from .streams import Acks, put_payload, standby


def test_a_promotion_between_two_slices_of_one_read_appends_nothing_after_its_epoch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # slices of two records: the read's two messages (three records, one run) are two slices
    monkeypatch.setattr(receiver, "APPLY_RECORDS", 2)
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
                         b"".join(wire.encode_records(0, [put_payload(1), put_payload(2)]))
                         + b"".join(wire.encode_records(2, [put_payload(3)])))  # fmt: skip
            asyncio.get_running_loop().call_soon(promote)
            rc._writer = cast(asyncio.StreamWriter, acks)
            await rc._stream(feed, cast(asyncio.StreamWriter, acks), wire.RecordDecoder(), [0.0])

        asyncio.run(main())
        ops = [(decode(f.payload).op, decode(f.payload).job_id) for f in wal.log.read(0)]
        assert ops == [(Op.PUT, 1), (Op.PUT, 2), (Op.EPOCH, 0)]
        assert sorted(engine.jobs) == [1, 2]


def test_the_messages_of_one_read_that_follow_on_are_applied_in_one_step_and_acknowledged_once(tmp_path: Path) -> None:
    """One engine step (``applied``: the server's timer re-arm) and one acknowledgement per read,
    not per message; a message that does not follow on is refused, the run before it written.
    (The jobs are delayed, each sooner than the last: every read's records move the engine's
    soonest timer, so each asks for its step; see the next test for puts that do not.)"""
    with Wal.open(tmp_path, durability="always") as wal:
        rc = standby(wal, 1)  # (never connects: its read is fed to it below)
        steps: list[int] = []
        rc.applied = lambda: steps.append(wal.log.next_offset)
        acks = Acks()

        def put(jid: int) -> bytes:
            return put_payload(jid, (100 - jid) * 1_000_000)

        async def main() -> None:
            feed = _Feed(cast(asyncio.BaseTransport, None), 1 << 20,
                         b"".join(wire.encode_records(0, [put(1), put(2)]))
                         + b"".join(wire.encode_records(2, [put(3)]))
                         + wire.encode_frames(3, 0, encode_data_frames([put(4), put(5)], 3, 7, 1)))  # fmt: skip
            feed.connection_lost(None)
            rc._writer = cast(asyncio.StreamWriter, acks)
            with pytest.raises(EOFError):
                await rc._stream(feed, cast(asyncio.StreamWriter, acks), wire.RecordDecoder(), [0.0])
            assert acks.sent == [5]  # one acknowledgement for the read
            # then a message that skips offset 5: refused, nothing of it written
            bad = _Feed(cast(asyncio.BaseTransport, None), 1 << 20,
                        b"".join(wire.encode_records(5, [put(6)])) + b"".join(wire.encode_records(7, [put(8)])))
            with pytest.raises(wire.WireError, match="sent offset 7"):
                await rc._stream(bad, cast(asyncio.StreamWriter, acks), wire.RecordDecoder(), [0.0])

        asyncio.run(main())
        assert steps == [5, 6, 6]  # (the refused message's step, whatever happens, finds nothing new)
        assert sorted(rc.engine.jobs) == [1, 2, 3, 4, 5, 6]


def test_reads_of_puts_that_move_no_timer_ask_for_no_engine_step(tmp_path: Path) -> None:
    """``applied`` (a tick of the engine, ~1.5k instructions) runs for a read only when its
    records may need it (``Reservations.tick_due``): after the stream's first read, ready puts
    need none; a delayed one sooner than any timer the engine has does."""
    with Wal.open(tmp_path, durability="always") as wal:
        rc = standby(wal, 1)  # (never connects: its reads are fed to it below)
        steps: list[int] = []
        rc.applied = lambda: steps.append(wal.log.next_offset)
        acks = Acks()

        async def main() -> None:
            reads = [b"".join(wire.encode_records(0, [put_payload(1), put_payload(2)])),  # the first: a step
                     b"".join(wire.encode_records(2, [put_payload(3)])),  # ready puts: none
                     b"".join(wire.encode_records(3, [put_payload(4, 50_000_000)])),  # delayed: a step
                     b"".join(wire.encode_records(4, [put_payload(5, 60_000_000)])),  # later than job 4's: none
                     b"".join(wire.encode_records(5, [put_payload(6)]))]  # fmt: skip
            for i, data in enumerate(reads):
                feed = _Feed(cast(asyncio.BaseTransport, None), 1 << 20, data)
                feed.connection_lost(None)
                rc._writer = cast(asyncio.StreamWriter, acks)
                with pytest.raises(EOFError):
                    await rc._stream(feed, cast(asyncio.StreamWriter, acks), wire.RecordDecoder(), [0.0])
                assert wal.log.next_offset == [2, 3, 4, 5, 6][i]

        asyncio.run(main())
        assert steps == [2, 4]
        assert sorted(rc.engine.jobs) == [1, 2, 3, 4, 5, 6]
        assert rc.engine.next_deadline() == 50.0  # job 4's delay: what the step at 4 re-armed
