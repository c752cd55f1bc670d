"""Timers that fire for many jobs at one instant work in slices of at most ``step_jobs`` jobs
per engine step (issue 11 item 4): 50,000 delays ending together, or a connection's 50,000
reserved jobs passing their TTR, never hold the loop for one long step; the engine says it is
behind (``next_deadline`` <= now) until they are all moved, and the order rules still hold."""

from __future__ import annotations

import pytest

from stalkd.engine import Engine
from stalkd.engine.model import Op
from stalkd.protocol import commands as C

from .harness import Harness

K = 8


def _count(h: Harness, key: str, tube: str = "default") -> int:
    """Read without a step (a command would move a slice of its own)."""
    t = h.e.tubes[tube]
    return len(t.ready) if key == "current-jobs-ready" else len(t.delayed)


def _stats_tube(h: Harness, key: str, tube: str = "default") -> int:
    h.ensure(99)
    return int(h.do(99, C.StatsTube(tube)).values[key])  # type: ignore[union-attr]


def _drain_ticks(h: Harness, moved: str, total: int) -> list[int]:
    """Tick at the same instant until the engine is no longer behind; the count after each."""
    seen = []
    while h.e.behind():
        out = h.e.tick(h.now)
        h._absorb(out)
        seen.append(_count(h, moved))
        assert len(seen) <= total, "no progress"
    return seen


def test_delays_ending_together_move_k_jobs_a_step() -> None:
    h = Harness(step_jobs=K)
    n = 5 * K + 3
    for _ in range(n):
        h.do(1, C.Put(0, 3, 60, b"d"))
    # When every delay has ended, one tick moves K of them and says it is behind
    out = h.sleep(4)
    assert _count(h, "current-jobs-ready") == K
    assert out.next_deadline is not None and out.next_deadline <= h.now
    # Then each further step moves at most K more, until all are ready
    seen = _drain_ticks(h, "current-jobs-ready", n)
    assert seen == [min(n, K * i) for i in range(2, len(seen) + 2)]
    assert seen[-1] == n and _count(h, "current-jobs-delayed") == 0
    assert h.e.next_deadline() is None


def test_a_command_during_the_backlog_takes_one_slice_of_it() -> None:
    h = Harness(step_jobs=K)
    for _ in range(3 * K):
        h.do(1, C.Put(0, 3, 60, b"d"))
    h.now += 4  # the delays end; nobody ticked yet
    # A command step moves one budget's worth before it runs (the stats-tube itself is a step)
    assert _stats_tube(h, "current-jobs-ready") == K
    assert _stats_tube(h, "current-jobs-ready") == 2 * K
    assert h.e.behind()


def test_reserved_jobs_passing_their_ttr_together_move_k_a_step() -> None:
    h = Harness(step_jobs=K)
    n = 3 * K + 1
    for _ in range(n):
        h.do(1, C.Put(0, 0, 1, b"r"))
    for _ in range(n):
        assert isinstance(h.do(1, C.Reserve()), C.JobReply)
    h.records.clear()
    h.sleep(2)
    assert _count(h, "current-jobs-ready") == K
    assert sum(r.op is Op.TIMEOUT for r in h.records) == K
    seen = _drain_ticks(h, "current-jobs-ready", n)
    assert seen[-1] == n and all(b - a <= K for a, b in zip([K, *seen], seen, strict=False))
    assert sum(r.op is Op.TIMEOUT for r in h.records) == n
    assert h.e.job_timeouts == n


def test_a_job_left_due_beats_a_timeout_at_the_same_instant() -> None:
    h = Harness(step_jobs=K)
    # Given tube a with 3K delays and tube b with one, all ending at t+4
    h.do(1, C.Use("a"))
    for _ in range(3 * K):
        h.do(1, C.Put(0, 4, 60, b"a"))
    h.do(1, C.Use("b"))
    h.do(1, C.Put(0, 4, 60, b"b"))
    # And a reserver on b whose timeout ends at that same instant
    h.do(2, C.Watch("b"))
    h.do(2, C.Ignore("default"))
    assert h.do(2, C.ReserveWithTimeout(4)) is None
    # When the instant comes and the budget runs out on tube a first
    h.sleep(4)
    assert h.take_wakeups(2) == []  # not TIMED_OUT while jobs are left due
    while h.e.behind():
        h.sleep(0)
    # Then b's job reaches the reserver, as when every timer ran in one step
    assert h.take_wakeups(2) == [C.JobReply("RESERVED", 3 * K + 1, b"b")]


def test_a_kick_shares_the_step_budget_with_the_timers() -> None:
    h = Harness(step_jobs=K)
    for _ in range(2 * K):
        h.do(1, C.Put(0, 3600, 60, b"k"))
    assert h.do(1, C.Kick(2 * K)) is None  # one budget kicked, the rest in tick()
    assert _count(h, "current-jobs-ready") == K
    out = h.e.tick(h.now)
    assert out.wakeups == ((1, C.Reply("KICKED", (2 * K,))),)


def test_step_jobs_must_be_positive() -> None:
    with pytest.raises(ValueError, match="step_jobs"):
        Engine(step_jobs=0)
