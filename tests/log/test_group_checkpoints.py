"""When a consumer group's acks reach its cursor file under ``never`` and ``every:<ms>``: at most
the interval after the ack, whether or not the consumer calls the group again, so a process
crash (``Log.abandon``) gives back only the acks of that last interval.

The group's interval clock is replaced by a counter the test sets (``stalkd.log.group.monotonic``),
so "due" and "not due yet" are decided by the test, not by how fast the machine is."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.log import Log
from stalkd.log import group as group_module
from stalkd.log.cursor import read_cursor
from support import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(group_module, "monotonic", c)
    return c


def on_disk(path: Path) -> int:
    """The committed head of group g's checkpoint in its file (-1: none yet)."""
    state = read_cursor(str(path / "groups" / "g.cur"))
    return -1 if state is None else state.committed


def acked_on_disk(path: Path) -> tuple[tuple[int, int], ...]:
    state = read_cursor(str(path / "groups" / "g.cur"))
    return () if state is None else state.acked


def crash_and_reopen(log: Log, path: Path, policy: str) -> list[int]:
    """Abandon ``log`` as a kill -9 would, reopen it and poll: the offsets handed out again."""
    log.abandon()
    with Log.open(path, durability=policy) as again:
        return [m.offset for m in again.group("g").poll(100)]


@pytest.mark.parametrize("policy", ["never", "every:100"])
def test_every_due_checkpoint_is_written_not_only_the_first(tmp_path: Path, clock: Clock, policy: str) -> None:
    """The campaign's "acks undone outside the window" under never: after a group's first
    checkpoint, the file waited for an fsync that never comes under never, so no later ack
    reached it until the log closed, and a kill -9 gave back every ack since."""
    log = Log.open(tmp_path, durability=policy)
    log.append_many([b"r%d" % i for i in range(20)])
    g = log.group("g")
    for step in range(1, 4):
        clock.now += 0.2  # past the interval: each of these acks is due at once
        g.ack(*g.poll(5))
        wait_until(lambda: on_disk(tmp_path) == 5 * step, f"checkpoint {step} (committed {5 * step}) on disk")  # noqa: B023
    assert crash_and_reopen(log, tmp_path, policy) == list(range(15, 20))


@pytest.mark.parametrize("policy", ["never", "every:100"])
def test_a_deferred_checkpoint_is_written_when_due_without_another_call(tmp_path: Path, clock: Clock,
                                                                        policy: str) -> None:
    """A consumer acks within the interval of the previous checkpoint, then idles (or blocks in
    poll): the checkpoint waits for the interval, not for the consumer's next call."""
    log = Log.open(tmp_path, durability=policy)
    log.append_many([b"r%d" % i for i in range(20)])
    g = log.group("g")
    clock.now += 0.2
    g.ack(*g.poll(5))
    wait_until(lambda: on_disk(tmp_path) == 5, "the first checkpoint on disk")
    clock.now += 0.05  # within the 100 ms: not due yet
    g.ack(*g.poll(5))
    assert g.committed == 10
    assert on_disk(tmp_path) == 5  # the interval holds (checkpoints at most one per interval)
    clock.now += 0.06  # now due; the consumer makes no further call
    wait_until(lambda: on_disk(tmp_path) == 10, "the deferred checkpoint on disk")
    assert crash_and_reopen(log, tmp_path, policy) == list(range(10, 20))


def test_out_of_order_acks_deferred_then_due_survive_a_crash(tmp_path: Path, clock: Clock) -> None:
    """The campaign's case: acked ranges above the committed head, then no further call."""
    log = Log.open(tmp_path, durability="never")
    log.append_many([b"r%d" % i for i in range(20)])
    g = log.group("g")
    clock.now += 0.2
    msgs = g.poll(10)
    g.ack(*msgs[:2])
    wait_until(lambda: on_disk(tmp_path) == 2, "the first checkpoint on disk")
    g.ack(*msgs[5:8])  # out of order: 5..7 acked above the head at 2
    clock.now += 0.2
    wait_until(lambda: acked_on_disk(tmp_path) == ((5, 8),), "the acked range on disk")
    assert crash_and_reopen(log, tmp_path, "never") == [2, 3, 4, *range(8, 20)]


def test_a_deferred_checkpoint_does_not_touch_a_crashed_groups_file(tmp_path: Path, clock: Clock) -> None:
    log = Log.open(tmp_path, durability="never")
    log.append_many([b"r%d" % i for i in range(20)])
    g = log.group("g")
    clock.now += 0.2
    g.ack(*g.poll(5))
    g.ack(*g.poll(5))  # deferred
    log.abandon()
    clock.now += 1.0
    g._write_due()  # what the cursor thread does when the call falls due: nothing now
    assert g._file.error is None
    assert on_disk(tmp_path) == 5


def test_a_group_moved_from_never_to_every_still_checkpoints(tmp_path: Path, clock: Clock) -> None:
    """A slot written under never has no fsync coming; under every a checkpoint waits for its
    predecessor's fsync, so the group asks for that fsync itself rather than wait for ever."""
    log = Log.open(tmp_path, durability="never")
    log.append_many([b"r%d" % i for i in range(20)])
    g = log.group("g")
    clock.now += 0.2
    g.ack(*g.poll(5))
    assert on_disk(tmp_path) == 5
    log.group("g", durability="every:100")
    clock.now += 0.2
    g.ack(*g.poll(5))
    wait_until(lambda: on_disk(tmp_path) == 10, "the checkpoint after the change on disk")
    log.close()
