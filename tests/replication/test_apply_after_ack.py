"""A standby acknowledges a big read before it applies it, and a read that comes meanwhile is
appended and acknowledged first (``Receiver._take``, ``settle``): a synchronous primary's next
group commit does not wait for the apply of the one before. What sees the engine meanwhile
sees it whole: a snapshot (``Wal.apply_pending``), a promotion (``stop``), and the check of the
next message's EPOCH records (the epoch the pending ones leave). The real Receiver against a
scripted primary on the loop, its log durable under ``always``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stalkd.engine.handover import epoch_record
from stalkd.engine.model import encode
from stalkd.persist.wal import Wal
from stalkd.replication import receiver as receiver_module
from stalkd.replication import wire
from stalkd.replication.receiver import Receiver

from .streams import ScriptedPrimary, put_payload, run_against, until

BIG = receiver_module.DEFER_RECORDS * 3  # records in a read that is applied after the next


def puts(first: int, n: int) -> list[bytes]:
    return [put_payload(first + k + 1) for k in range(n)]


def records_message(first: int, payloads: list[bytes]) -> bytes:
    return b"".join(wire.encode_records(first, payloads))


class Watching(ScriptedPrimary):
    """A scripted primary that calls ``on_ack(ack)`` as each acknowledgement arrives, in the
    loop's callback that reads it (before the standby's task runs again)."""

    def __init__(self) -> None:
        super().__init__("")
        self.on_ack: Callable[[int], None] = lambda ack: None

    def data_received(self, data: bytes) -> None:
        seen = len(self.acks)
        super().data_received(data)
        for ack in self.acks[seen:]:
            self.on_ack(ack)


def stream(tmp_path: Path, script: Callable[[Watching, Receiver, Wal], object]) -> Receiver:
    return run_against(tmp_path, Watching(), script, problem_ok=True)


def test_a_big_read_is_acknowledged_before_it_is_applied_then_applied(tmp_path: Path) -> None:
    seen: list[tuple[int, int, int]] = []  # (ack, records not applied, jobs) as each ack arrives

    async def script(primary: Watching, rc: Receiver, swal: Wal) -> None:
        primary.on_ack = lambda ack: seen.append((ack, rc.unapplied, len(rc.engine.jobs)))
        primary.send(records_message(0, puts(0, BIG)))
        await until(lambda: len(rc.engine.jobs) == BIG, "the read to be applied")
        # Then its acknowledgement came while none of it was applied, and nothing waits now
        assert seen[0] == (BIG, BIG, 0)
        assert rc.unapplied == 0 and rc.records == BIG
        # and a small read (as at depth 1) is applied at once, in the step that acknowledges it
        primary.send(records_message(BIG, puts(BIG, 1)))
        await until(lambda: len(seen) == 2, "the small read's acknowledgement")
        assert seen[1] == (BIG + 1, 0, BIG + 1)

    stream(tmp_path, script)


def test_a_snapshot_while_records_wait_holds_them(tmp_path: Path) -> None:
    # Given records appended and acknowledged, not applied, when a snapshot starts
    async def script(primary: Watching, rc: Receiver, swal: Wal) -> None:
        def snapshot_now(ack: int) -> None:
            assert rc.unapplied == BIG  # (what this test is about: the snapshot comes now)
            swal.snapshot(rc.engine)

        primary.on_ack = snapshot_now
        primary.send(records_message(0, puts(0, BIG)))
        await until(lambda: bool(primary.acks), "the acknowledgement")
        # Then the snapshot applied them first: the engine holds them already
        assert rc.unapplied == 0 and len(rc.engine.jobs) == BIG

    stream(tmp_path, script)
    # and the copy that starts from the snapshot has every job (a snapshot at the log's end
    # with the engine behind it would skip them: nothing to replay after it)
    with Wal.open(tmp_path / "s", durability="always") as again:
        e, info = again.recover(0.0)
        assert sorted(e.jobs) == list(range(1, BIG + 1))
        assert info.records_replayed == 0


def test_a_stop_while_records_wait_applies_them_first(tmp_path: Path) -> None:
    # (a promotion stops the receiver, then writes its EPOCH record after every record appended)
    async def script(primary: Watching, rc: Receiver, swal: Wal) -> None:
        at_stop: list[int] = []

        def stop_now(ack: int) -> None:
            assert rc.unapplied == BIG
            rc.stop()
            at_stop.append(len(rc.engine.jobs))

        primary.on_ack = stop_now
        primary.send(records_message(0, puts(0, BIG)))
        await until(lambda: bool(at_stop), "the stop")
        assert at_stop == [BIG] and rc.unapplied == 0

    stream(tmp_path, script)


def epoch_payload(epoch: int, at: int) -> bytes:
    from stalkd.engine import Engine

    return encode(epoch_record(Engine(), epoch, at, 1.0))


SLICE = receiver_module.APPLY_RECORDS  # records taken in one step; a longer message is sliced


def epoch_message(second_epoch: int) -> bytes:
    """One message of two slices: the first starts epoch 1, the second ``second_epoch``."""
    payloads = [epoch_payload(1, 0)] + puts(0, SLICE - 1) + [epoch_payload(second_epoch, SLICE)] + puts(SLICE, 9)
    return records_message(0, payloads)


def test_a_slice_is_checked_against_the_epoch_the_waiting_ones_start(tmp_path: Path) -> None:
    # Given a message whose first slice starts epoch 1 (appended, not applied: it waits) and
    # whose second starts epoch 1 again
    async def script(primary: Watching, rc: Receiver, swal: Wal) -> None:
        primary.send(epoch_message(1))
        # Then the second is refused, with nothing of it written, and the first is applied
        await until(lambda: rc.problem is not None and "not newer than 1" in rc.problem, "the refusal")
        assert swal.log.next_offset == SLICE
        await until(lambda: len(rc.engine.jobs) == SLICE - 1, "the first slice to be applied")
        assert rc.engine.epochs == ((1, 0),)

    stream(tmp_path, script)


def test_a_newer_epoch_after_waiting_records_is_followed(tmp_path: Path) -> None:
    async def script(primary: Watching, rc: Receiver, swal: Wal) -> None:
        primary.send(epoch_message(2))
        await until(lambda: rc.durable_end == SLICE + 10 and rc.unapplied == 0, "both slices, applied")
        assert rc.problem is None
        assert rc.engine.epochs == ((1, 0), (2, SLICE))
        assert len(rc.engine.jobs) == SLICE + 8

    stream(tmp_path, script)
