"""Groups and chains under crashes and concurrent slots, replayed step by step: the real
delivery pipeline over the in-memory server, deliveries advanced by hand.

A crash between a waiting job's re-put and the delete of what it copies leaves two live jobs,
and a restarted worker may reserve both in two slots: only one may run its handler. A crash at
any point of a member's last calls must leave its key held only while the member can still run,
and free only once its result is stored."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest

from stalkd.worker import App, pipeline, syncrun, unique
from stalkd.worker.actions import Complete, Recheck, WaitForDeps
from stalkd.worker.canvas import group
from stalkd.worker.copies import verdict
from stalkd.worker.memory import MemoryServer
from stalkd.worker.pipeline import Call, Delivered, RunHandler, Step
from stalkd.worker.results import Outcome
from stalkd.worker.serializer import decode_envelope
from stalkd.worker.task import Task

Steps = Generator[Step, Any, Delivered]


def advance(steps: Steps, server: MemoryServer, *, until: str) -> Step | Delivered:
    """Carry out calls until the delivery yields ``until`` ("run": the handler; "finish": its
    acknowledgement) or ends; that step (not carried out) or how it ended."""
    reply: Any = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration as end:
            return end.value  # type: ignore[no-any-return]
        if isinstance(step, RunHandler) and until == "run":
            return step
        if isinstance(step, Call) and step.op == "finish" and until == "finish":
            return step
        reply = run_step(step, server)


def run_step(step: Step, server: MemoryServer) -> Any:
    if isinstance(step, RunHandler):
        return None
    return getattr(server, step.op)(*step.args)


def finish(steps: Steps, step: Any, server: MemoryServer, app: App) -> Delivered:
    """Run the handler (if ``step`` is it) and the rest of the delivery."""
    if isinstance(step, RunHandler):
        syncrun.run_sync(app, step.ctx)
    reply = run_step(step, server) if isinstance(step, Call) else None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration as end:
            return end.value  # type: ignore[no-any-return]
        if isinstance(step, RunHandler):
            syncrun.run_sync(app, step.ctx)
            reply = None
        else:
            reply = run_step(step, server)


def reserve(app: App, server: MemoryServer, job_id: int) -> Steps:
    """A slot reserving ``job_id`` (whatever its state) and starting its delivery."""
    job = server.jobs[job_id]
    assert server.reserve_job(job_id) is not None
    return pipeline.deliver(app, job.id, job.body, tube=job.tube)


def newest(server: MemoryServer, tube: str) -> int:
    """The id of the job put last into ``tube`` (a waiting job's copy)."""
    return max(j.id for j in server.jobs.values() if j.tube == tube)


@pytest.fixture
def app() -> App:
    return App(middleware=[])


@dataclass
class Canvas:
    """The tasks of these tests: ``square`` the members, ``total`` the callback; ``ran`` the
    inputs each run of the callback's handler got."""

    square: Task[int]
    total: Task[list[int]]
    ran: list[list[int]]


@pytest.fixture
def tasks(app: App) -> Canvas:
    ran: list[list[int]] = []

    @app.task
    def square(n: int) -> int:
        return n * n

    @app.task
    def total(ns: list[int]) -> int:
        ran.append(ns)
        return sum(ns)

    return Canvas(square, total, ran)


def crashed_while_waiting(app: App, server: MemoryServer, callback: int) -> int:
    """Deliver the callback while its input is pending, up to its re-put, and lose the delete
    with the worker (the callback goes back to ready); the copy's id."""
    steps = reserve(app, server, callback)
    step = advance(steps, server, until="finish")
    assert isinstance(step, Call) and step.op == "finish"  # the copy is put; its delete is not
    server.worker_died(callback)  # its reserved job comes back
    copy = newest(server, server.jobs[callback].tube)
    header, _ = decode_envelope(server.jobs[copy].body, job_id=copy)
    assert header is not None and header.origin == callback and header.prev == callback
    return copy


def test_two_copies_reserved_at_once_run_the_callback_once(app: App, tasks: Canvas) -> None:
    square, total, ran = tasks.square, tasks.total, tasks.ran
    with app.testing() as t:
        h = group(square.s(2), square.s(3)).then(total.s()).put()
        copy = crashed_while_waiting(app, t.server, int(h))
        # the members complete (the callback and its copy wait, unreserved)
        for member in [j.id for j in t.server.jobs.values() if j.tube == "square"]:
            assert isinstance(finish(reserve(app, t.server, member), None, t.server, app).action, Complete)
        # Given both copies reserved by two slots at once
        first, second = reserve(app, t.server, int(h)), reserve(app, t.server, copy)
        # When both get as far as they go before a handler would run
        a = advance(first, t.server, until="run")
        b = advance(second, t.server, until="run")
        # Then exactly one reached the handler; the other was released to look again
        assert isinstance(a, RunHandler)
        assert isinstance(b, Delivered) and isinstance(b.action, Recheck) and b.acked
        assert t.server.jobs[copy].state == "delayed"
        done = finish(first, a, t.server, app)
        assert isinstance(done.action, Complete) and done.acked
        # and the copy, delivered again, finds the outcome and only deletes itself
        again = advance(reserve(app, t.server, copy), t.server, until="run")
        assert isinstance(again, Delivered) and isinstance(again.action, Complete)
        assert h.result(timeout=0) == 13
    assert ran == [[4, 9]]
    assert not [j for j in t.server.jobs.values() if j.tube == "total"]


def test_a_copy_named_by_the_record_runs_and_the_job_it_copies_goes_away(app: App, tasks: Canvas) -> None:
    square, total, ran = tasks.square, tasks.total, tasks.ran
    """The crash came after the waiting record was stored but before the delete."""
    with app.testing() as t:
        h = group(square.s(5)).then(total.s()).put()
        steps = reserve(app, t.server, int(h))
        step = advance(steps, t.server, until="finish")
        assert isinstance(step, Call)
        _how, _job, _pri, _delay, waits = step.args
        t.server.store_result(*waits)  # the record landed; the delete did not
        t.server.worker_died(int(h))
        copy = newest(t.server, "total")
        for member in [j.id for j in t.server.jobs.values() if j.tube == "square"]:
            finish(reserve(app, t.server, member), None, t.server, app)
        first, second = reserve(app, t.server, int(h)), reserve(app, t.server, copy)
        a = advance(first, t.server, until="run")
        b = advance(second, t.server, until="run")
        assert isinstance(a, Delivered) and isinstance(a.action, Complete)  # stale: deleted
        assert int(h) not in t.server.jobs
        assert isinstance(b, RunHandler)
        finish(second, b, t.server, app)
        assert h.result(timeout=0) == 25
    assert ran == [[25]]


def test_a_copy_woken_before_the_delete_of_what_it_copies_is_kept(app: App, tasks: Canvas) -> None:
    square, total, ran = tasks.square, tasks.total, tasks.ran
    """The copy became ready while the job it copies was still being deleted: it must not go
    away (that delete is about to make it the one to run)."""
    with app.testing() as t:
        h = group(square.s(1)).then(total.s()).put()
        steps = reserve(app, t.server, int(h))
        step = advance(steps, t.server, until="finish")
        copy = newest(t.server, "total")
        early = advance(reserve(app, t.server, copy), t.server, until="run")
        assert isinstance(early, Delivered) and isinstance(early.action, Recheck)
        assert copy in t.server.jobs
        done = finish(steps, step, t.server, app)
        assert isinstance(done.action, WaitForDeps) and int(h) not in t.server.jobs
        t.drain()
        assert h.result(timeout=0) == 1
    assert ran == [[1]]


@pytest.mark.parametrize(("job", "prev", "record", "exists", "expected"), [
    (7, None, None, None, "run"),
    (7, None, Outcome("waiting", 9), None, "stale"),
    (9, 7, Outcome("waiting", 9), None, "run"),
    (9, 7, Outcome("waiting", 9), True, "run"),
    (9, 7, None, None, "check-prev"),
    (9, 7, None, True, "recheck"),
    (9, 7, None, False, "run"),
    (9, 7, Outcome("waiting", 7), True, "recheck"),
    (9, 7, Outcome("waiting", 11), False, "stale"),
    (9, 7, Outcome("failed"), True, "finished"),
    (9, 7, Outcome("done", 1), None, "finished"),
])
def test_which_copy_runs(job: int, prev: int | None, record: Outcome | None, exists: bool | None,
                         expected: str) -> None:
    assert verdict(job, prev, record, prev_exists=exists) == expected


def test_a_member_killed_at_any_point_of_its_acknowledgement_leaves_its_key_consistent(app: App, tasks: Canvas) -> None:
    square = tasks.square
    crash_points = 0
    while True:
        with app.testing() as t:
            (member,) = group(square.s(3)).put()
            header, _ = decode_envelope(t.server.jobs[int(member)].body, job_id=int(member))
            assert header is not None and header.key is not None
            steps = reserve(app, t.server, int(member))
            step = advance(steps, t.server, until="run")
            assert isinstance(step, RunHandler)
            syncrun.run_sync(app, step.ctx)
            reply: Any = None
            for _ in range(crash_points):  # the calls that got through before the crash
                try:
                    step = steps.send(reply)
                except StopIteration:
                    return
                reply = run_step(step, t.server)
            # the worker dies here: its reserved job comes back
            if int(member) in t.server.jobs:
                t.server.worker_died(int(member))
            held = unique.pending(t.server, header.key)
            # Then a held key has a job that will free it, and a free one has its result
            assert (int(member) in t.server.jobs) if held else (member.result(timeout=0) == 9)
        crash_points += 1


def _waiter(key: str, job_id: int) -> Generator[unique.OpCall, Any, None]:
    freed = yield from unique.wait_steps(key, job_id)
    if freed is not None:
        yield from unique.woken_steps(job_id, freed)


def _finisher(key: str, marker: int) -> Generator[unique.OpCall, Any, None]:
    yield ("delete", (marker,))
    yield from unique.wake_steps(key)


def _interleave(schedule: tuple[int, ...]) -> tuple[MemoryServer, int, str] | None:
    """Run a waiter and a key's finisher, one server call at a time, in the order of
    ``schedule`` (0: the waiter's next call, 1: the finisher's); None if it does not fit."""
    server = MemoryServer()
    key = "k"
    marker = unique.claim(server, key, now=0.0)
    assert marker is not None
    job = server.put("t", b"copy", 0, 3600, 60)
    runs = [_waiter(key, job), _finisher(key, marker)]
    replies: list[Any] = [None, None]
    done = [False, False]
    for who in schedule:
        if done[who]:
            return None
        try:
            op, args = runs[who].send(replies[who])
        except StopIteration:
            done[who] = True
            continue
        replies[who] = getattr(server, op)(*args)
    for who in (0, 1):  # the rest, in turn
        while not done[who]:
            try:
                op, args = runs[who].send(replies[who])
            except StopIteration:
                done[who] = True
                continue
            replies[who] = getattr(server, op)(*args)
    return server, job, unique.wait_tube(key)


def test_a_waiter_is_woken_and_removed_whatever_the_interleaving_with_its_key_being_freed() -> None:
    import itertools

    tried = 0
    for n in range(12):
        for schedule in itertools.product((0, 1), repeat=n):
            got = _interleave(schedule)
            if got is None:
                continue
            server, job, wait_tube = got
            tried += 1
            assert server.jobs[job].state == "ready", schedule  # woken, not left delayed
            assert server.in_tube(wait_tube, "ready") == [], schedule  # no waiter left behind
    assert tried > 100


def test_a_copy_that_sees_the_job_it_copies_go_while_it_decides_still_runs(app: App, tasks: Canvas) -> None:
    square, total, ran = tasks.square, tasks.total, tasks.ran
    """The job copied is deleted (with the record naming the copy) between the copy's first and
    second server calls: the copy must run, not take itself for a stale one."""
    with app.testing() as t:
        h = group(square.s(4)).then(total.s()).put()
        # the callback waited once already: the record names its first copy
        first = advance(reserve(app, t.server, int(h)), t.server, until="run")
        assert isinstance(first, Delivered) and isinstance(first.action, WaitForDeps)
        waiting = reserve(app, t.server, newest(t.server, "total"))
        finish_step = advance(waiting, t.server, until="finish")
        copy = newest(t.server, "total")
        for member in [j.id for j in t.server.jobs.values() if j.tube == "square"]:
            finish(reserve(app, t.server, member), None, t.server, app)
        woken = reserve(app, t.server, copy)
        step = woken.send(None)  # the copy's first look
        reply = run_step(step, t.server)
        finish(waiting, finish_step, t.server, app)  # the job copied goes, naming the copy
        again = step = woken.send(reply)
        while isinstance(step, Call):
            step = woken.send(run_step(step, t.server))
        assert isinstance(step, RunHandler), again
        finish(woken, step, t.server, app)
        assert h.result(timeout=0) == 16
    assert ran == [[16]]
