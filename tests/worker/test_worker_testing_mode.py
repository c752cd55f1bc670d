"""app.testing(): the in-process broker users write their tests with. It drives the same core
steps and middleware as a real worker, so these tests also pin down retry/dead-letter decisions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stalkd.worker import App, Backoff, NonRetryable, Retry, ValidationError
from stalkd.worker.actions import Complete, DeadLetter, GiveUp, RetryLater, WaitForDeps
from stalkd.worker.middleware import Retries


def make_app() -> App:
    # Retries with a fixed random source so backoff delays are exact.
    return App(middleware=[Retries(clock=lambda: 1000.0, rng=lambda: 0.5)])


def test_collecting_mode_queues_until_consumed() -> None:
    app = make_app()
    seen: list[Any] = []
    send = app.task(seen.append, name="send", tube="emails")
    with app.testing() as t:
        # Given two puts, When nothing is consumed, Then nothing ran
        send.put({"to": "a"})
        send.put({"to": "b"})
        assert seen == [] and len(t.queued) == 2
        # When both are consumed, Then they ran in order and were deleted
        assert [c.action for c in t.drain()] == [Complete(), Complete()]
    assert seen == [{"to": "a"}, {"to": "b"}]


def test_priority_orders_consumption() -> None:
    app = make_app()
    seen: list[int] = []
    task = app.task(seen.append, name="t")
    with app.testing() as t:
        task.put(1, priority=10)
        task.put(2, priority=5)
        t.drain()
    assert seen == [2, 1]


def test_failures_are_released_with_the_backoff_schedule_then_dead_lettered() -> None:
    app = make_app()
    calls = 0

    @app.task(max_attempts=4, backoff=Backoff(base=2, jitter=0))
    def flaky(payload: int) -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError(f"down #{calls}")

    with app.testing() as t:
        flaky.put(7)
        results = t.drain()
    # Given max_attempts=4, Then 3 releases with 2, 4, 8 s, then a bury with a record.
    assert [r.attempt for r in results] == [1, 2, 3, 4]
    assert [r.action for r in results[:3]] == [RetryLater(2, 2**31), RetryLater(4, 2**31), RetryLater(8, 2**31)]
    bury = results[3].action
    assert isinstance(bury, GiveUp)
    record = t.failed[0]
    assert record.attempts == 4 and record.task == "flaky" and record.tube == "flaky"
    assert record.error == "ConnectionError: down #4"
    assert "raise ConnectionError" in record.traceback
    assert DeadLetter.from_json(record.to_json()) == record
    assert calls == 4


def test_non_retryable_exceptions_dead_letter_at_once() -> None:
    app = make_app()

    class Declined(NonRetryable):
        pass

    @app.task(max_attempts=10)
    def charge(payload: dict[str, int]) -> None:
        raise Declined("card expired")

    with app.testing() as t:
        charge.put({"cents": 100})
        results = t.drain()
    assert len(results) == 1 and isinstance(results[0].action, GiveUp)
    assert t.failed[0].error == "Declined: card expired"


@pytest.mark.parametrize("how", ["delay", "countdown"])  # countdown: Celery's name
def test_retry_exception_sets_its_own_delay(how: str) -> None:
    app = make_app()

    @app.task(max_attempts=2)
    def later(payload: None) -> None:
        raise Retry("not yet", **{how: 30})

    with app.testing() as t:
        later.put(None)
        first = t.consume_one()
    assert first.action == RetryLater(30, 2**31)


def test_validation_rejects_at_put_time_and_queues_nothing() -> None:
    app = make_app()

    def positive(p: Any) -> None:
        if p <= 0:
            raise ValueError("must be positive")

    task = app.task(lambda p: None, name="t", validate=positive)
    plain = app.task(lambda p: None, name="plain")
    with app.testing() as t:
        with pytest.raises(ValidationError, match="task t: payload rejected: must be positive"):
            task.put(-1)
        with pytest.raises(ValidationError, match="task plain: payload cannot be serialized"):
            plain.put(object())
        assert t.queued == []


def test_eager_mode_runs_at_put_and_raises_the_final_error() -> None:
    app = make_app()
    seen: list[int] = []
    ok = app.task(seen.append, name="ok")

    @app.task(max_attempts=2)
    def bad(p: int) -> None:
        raise KeyError(p)

    with app.testing(eager=True) as t:
        ok.put(3)
        assert seen == [3]
        with pytest.raises(KeyError):
            bad.put(9)
        assert len(t.failed) == 1 and t.failed[0].attempts == 2


def test_force_retry_proves_idempotence() -> None:
    app = make_app()
    balance = {"a": 0}
    applied: set[str] = set()

    @app.task
    def credit(p: dict[str, Any]) -> None:
        if p["op"] in applied:  # idempotent by operation id
            return
        applied.add(p["op"])
        balance["a"] += p["amount"]

    with app.testing() as t:
        credit.put({"op": "x1", "amount": 5})
        t.consume_one()
        # When the same job is delivered again (as after a crash before its delete)
        again = t.force_retry()
    # Then the side effect happened once
    assert again.action == Complete() and balance["a"] == 5


def test_unique_keys_make_duplicate_puts_no_ops_until_completion() -> None:
    app = make_app()
    task = app.task(lambda p: None, name="t")
    with app.testing() as t:
        first = task.put(1, key="order-1")
        assert first is not None and not first.duplicate
        dup = task.put(2, key="order-1")
        assert dup == first and dup is not None and dup.duplicate  # the pending job's handle
        assert len(t.queued) == 1
        t.drain()
        # After completion the key is free again
        again = task.put(3, key="order-1")
        assert again is not None and again != first and not again.duplicate


def test_depends_on_waits_for_the_key_to_complete() -> None:
    app = make_app()
    order: list[str] = []
    a = app.task(lambda p: order.append("a"), name="a")
    b = app.task(lambda p: order.append("b"), name="b")
    with app.testing() as t:
        # Given b depends on a's key and is more urgent
        b.put(None, depends_on=["A"], priority=0)
        a.put(None, key="A", priority=100)
        results = t.drain()
    # Then b was deferred once and ran after a
    assert order == ["a", "b"]
    assert isinstance(results[0].action, WaitForDeps)


def test_async_tasks_run_in_testing_mode() -> None:
    app = make_app()
    seen: list[int] = []

    @app.task
    async def coro(p: int) -> None:
        await asyncio.sleep(0)
        seen.append(p)

    with app.testing() as t:
        coro.put(4)
        t.drain()
    assert seen == [4]


def test_unknown_task_and_garbage_bodies_are_dead_lettered_with_a_reason() -> None:
    app = make_app()
    app.task(lambda p: None, name="a", tube="shared")
    app.task(lambda p: None, name="b", tube="shared")
    with app.testing() as t:
        # Given bodies another producer put straight into the tube
        t.server.put("shared", b'#stalkd1 {"t":"zzz"}\n1', 0, 0, 60)
        t.server.put("shared", b"not json", 0, 0, 60)
        t.drain()
    errors = [r.error for r in t.failed]
    assert "UnknownTask: job 1: no task named 'zzz'" in errors[0]
    assert errors[1].startswith("UnknownTask: job 2: bare body")


def test_a_pluggable_serializer_is_used_both_ways() -> None:
    import pickle

    class Pickle:
        def dumps(self, payload: Any) -> bytes:
            return pickle.dumps(payload)

        def loads(self, data: bytes) -> Any:
            return pickle.loads(data)

    app = App(serializer=Pickle(), middleware=[Retries()])
    seen: list[Any] = []
    task = app.task(seen.append, name="t")
    with app.testing() as t:
        task.put({1, 2, 3})  # a set: not JSON-serializable
        assert pickle.loads(t.queued[0].body.split(b"\n", 1)[1]) == {1, 2, 3}
        t.drain()
    assert seen == [{1, 2, 3}]


def test_an_undecodable_body_is_reported_with_its_tube_asked_of_the_server() -> None:
    import json

    from stalkd.worker import pipeline

    app = make_app()
    app.task(lambda p: None, name="a", tube="shared")
    app.task(lambda p: None, name="b", tube="shared")
    # Given a delivery whose driver does not know the tube (it reserved from several)
    steps = pipeline.deliver(app, 7, b"not json", tube=None)
    calls: list[Any] = []
    reply: Any = None
    answers = {"stats_job": {"tube": "shared", "releases": 0}, "put": 99, "finish": (True, None)}
    try:
        while True:
            step = steps.send(reply)
            calls.append(step)
            reply = answers[step.op]
    except StopIteration as end:
        done = end.value
    # Then the server was asked, and the dead-letter record names the tube, not None or ?
    assert calls[0].op == "stats_job"
    (put,) = [c for c in calls if c.op == "put"]
    record = json.loads(put.args[1])
    assert record["tube"] == "shared" and "tube None" not in record["error"], record
    assert done.acked and done.ctx is None


def test_a_dead_letter_kicked_back_runs_as_one_attempt_more() -> None:
    app = App(middleware=[Retries()])
    always = app.task(lambda p: 1 / 0, name="always", max_attempts=2)
    with app.testing() as t:
        # Given a job dead-lettered after its 2 attempts
        job_id = always.put(None)
        assert job_id is not None
        t.drain()
        assert [r.attempts for r in t.failed] == [2]
        # When it is kicked back, as `stalkd retry` does, and fails again
        assert t.server.kick_job(job_id)
        (again,) = t.drain()
    # Then that run was attempt 3, and its dead letter says so
    assert again.attempt == 3
    assert [r.attempts for r in t.failed] == [2, 3]


def test_a_postponed_job_uses_no_attempt_and_keeps_those_it_used() -> None:
    from stalkd.worker.errors import Postpone

    app = App(middleware=[Retries()])
    calls: list[str] = []

    @app.task(max_attempts=3)
    def flaky(p: None) -> None:
        calls.append("postponed" if len(calls) == 1 else "failed")
        if len(calls) == 2:
            raise Postpone(30)  # e.g. a rate limit's token is not due for 30 s
        raise ValueError("boom")

    with app.testing() as t:
        flaky.put(None)
        done = t.drain()
    # Then the postponed run was put again (no attempt used) and the attempts it had used went
    # along with it: attempts 1, (postponed), 2, 3, then the dead letter says 3
    assert calls == ["failed", "postponed", "failed", "failed"]
    assert [c.attempt for c in done if not isinstance(c.action, WaitForDeps)] == [1, 2, 3]
    assert [r.attempts for r in t.failed] == [3]


def test_testing_mode_runs_the_servers_own_engine_over_a_virtual_clock() -> None:
    # Given jobs of mixed priorities and delays in app.testing()
    app = make_app()
    seen: list[str] = []
    task = app.task(lambda p: seen.append(p), name="t")
    with app.testing() as t:
        task.put("later", delay=3600)
        task.put("low", priority=10)
        task.put("high", priority=1)
        # When they are drained, the engine's order holds: ready by priority, then the delayed
        # one, reached by the clock jumping to its deadline rather than by waiting an hour
        t.drain()
        assert t.server.now == 3600
    assert seen == ["high", "low", "later"]


def test_a_reservation_whose_ttr_ends_comes_back_as_on_a_server() -> None:
    # Given a reserved job (held by a worker slot's connection) in testing mode
    app = make_app()
    task = app.task(lambda p: None, name="t")
    with app.testing() as t:
        handle = task.put(None, ttr=30)
        assert handle is not None
        job_id = int(handle)
        assert t.server.reserve_job(job_id) is not None
        assert t.server.jobs[job_id].state == "reserved"
        # When its TTR runs out on the virtual clock, the engine gives it back with a timeout
        t.server.advance(31)
        assert t.server.jobs[job_id].state == "ready"
        assert t.server.stats_job(job_id)["timeouts"] == 1  # type: ignore[index]
        # and a slot whose worker died gives its job back at once
        assert t.server.reserve_job(job_id) is not None
        t.server.worker_died(job_id)
        assert t.server.jobs[job_id].state == "ready"
