"""A kick of many jobs moves STEP_JOBS jobs per engine step (issue 11 item 4): the loop is never
held for a time that grows with the jobs, and the reply is the one beanstalkd gives."""

from __future__ import annotations

import pytest

from stalkd.engine import EngineError
from stalkd.engine.state import STEP_JOBS
from stalkd.protocol import commands as C

from .harness import Harness


def _buried(h: Harness, n: int) -> None:
    for i in range(n):
        h.do(1, C.Put(0, 0, 60, b"j"))
        h.do(1, C.ReserveJob(i + 1))
        h.do(1, C.Bury(i + 1, 0))


def _count(h: Harness, state: str) -> int:
    return int(h.do(2, C.Stats()).values["current-jobs-" + state])  # type: ignore[union-attr]


def test_a_long_kick_goes_on_in_tick_and_answers_once() -> None:
    h = Harness()
    n = 2 * STEP_JOBS + 100
    _buried(h, n + 5)
    h.ensure(2)
    # When conn 1 kicks n buried jobs, the first step kicks STEP_JOBS and the reply waits
    out = h.e.apply(1, C.Kick(n), h.now)
    assert out.reply is None and out.next_deadline == h.now
    assert _count(h, "buried") == n + 5 - STEP_JOBS
    # Then other connections are served between the steps, and the kicker may send nothing
    assert h.do(2, C.Peek(1)) == C.JobReply("FOUND", 1, b"j")
    with pytest.raises(EngineError):
        h.e.apply(1, C.Peek(1), h.now)
    steps = 0
    woken: list[tuple[int, C.AnyReply]] = []
    while not woken:
        out = h.e.tick(h.now)
        woken.extend(out.wakeups)
        steps += 1
    # And the one reply counts every job kicked, oldest buried first, as beanstalkd's
    assert woken == [(1, C.Reply("KICKED", (n,)))]
    assert steps == 2
    assert _count(h, "buried") == 5 and _count(h, "ready") == n
    assert h.e.next_deadline() is None
    assert int(h.do(2, C.Stats()).values["cmd-kick"]) == 1  # type: ignore[union-attr]


def test_a_kick_of_delayed_jobs_stops_when_they_run_out() -> None:
    h = Harness()
    for _ in range(STEP_JOBS + 10):
        h.do(1, C.Put(0, 3600, 60, b"d"))
    assert h.do(1, C.Kick(10**6)) is None
    out = h.e.tick(h.now)
    assert out.wakeups == ((1, C.Reply("KICKED", (STEP_JOBS + 10,))),)


def test_a_kicker_that_disconnects_ends_its_kick() -> None:
    h = Harness()
    _buried(h, STEP_JOBS + 10)
    assert h.do(1, C.Kick(STEP_JOBS + 10)) is None
    h.e.disconnect(1, h.now)
    out = h.e.tick(h.now)
    assert out.wakeups == () and h.e.next_deadline() is None
    h.ensure(2)
    assert _count(h, "buried") == 10
