"""Groups and chains in ``app.testing()`` (the real pipeline over the in-memory server): what the
callback and links receive, the ``waiting`` status, inputs whose results are gone, and the
payload rules."""

from __future__ import annotations

import pytest

from stalkd.worker import App
from stalkd.worker.canvas import chain, group
from stalkd.worker.results import TaskFailed
from stalkd.worker.serializer import decode_envelope


def make_app(**kw: object) -> tuple[App, list[object]]:
    app = App(**kw)  # type: ignore[arg-type]
    seen: list[object] = []

    @app.task
    def word(n: int) -> str:
        return "x" * n

    @app.task
    def join(words: list[str]) -> str:
        seen.append(words)
        return "-".join(words)

    @app.task
    def upper(s: str) -> str:
        seen.append(s)
        return s.upper()

    return app, seen


def test_the_callback_gets_the_members_results_in_member_order() -> None:
    app, seen = make_app(middleware=[])
    word, join = app.tasks["word"], app.tasks["join"]
    with app.testing() as t:
        members_first = group(word.s(3), word.s(1), word.s(2)).then(join.s()).put()
        t.drain()
        assert members_first.result(timeout=0) == "xxx-x-xx"
    assert seen == [["xxx", "x", "xx"]]


def test_a_job_waiting_for_its_inputs_reads_waiting_and_keeps_its_first_id() -> None:
    app, _ = make_app(middleware=[])
    word, join = app.tasks["word"], app.tasks["join"]
    with app.testing() as t:
        h = group(word.s(2)).then(join.s()).put()
        # the callback is the most recent job; run it first: its input is pending
        assert t.server.reserve_job(int(h)) is not None and t.server.release(int(h), 0, 0)
        t.consume_one()
        assert h.status() == "waiting"
        copy = next(j for j in t.server.jobs.values() if j.tube == "join")
        header, _ = decode_envelope(copy.body, job_id=copy.id)
        assert copy.id != int(h) and header is not None and header.origin == int(h)
        t.drain()
        assert h.result(timeout=0) == "xx" and h.status() == "done"


def test_an_input_whose_result_expired_fails_the_next_link_without_retries() -> None:
    app, seen = make_app()  # the default middleware: retries would apply to a retryable error
    word, upper = app.tasks["word"], app.tasks["upper"]
    with app.testing(raise_errors=False) as t:
        h = chain(word.s(2), upper.s()).put(result_ttl=10)
        t.consume_one()  # the first link
        now = t.results.clock()
        t.results.clock = lambda: now + 11  # its result expired before the next link ran
        t.drain()
        with pytest.raises(TaskFailed, match=r"InputMissing: input job \d+ has no result"):
            h.result(timeout=0)
        assert len(t.failed) == 1 and t.failed[0].attempts == 1
    assert seen == []


def test_payload_rules_are_checked_before_anything_is_put() -> None:
    app, _ = make_app(middleware=[])
    word, join, upper = app.tasks["word"], app.tasks["join"], app.tasks["upper"]
    with app.testing() as t:
        with pytest.raises(ValueError, match="give its payload"):
            group(word.s(1), word.s()).put()
        with pytest.raises(ValueError, match="give it no payload"):
            group(word.s(1)).then(join.s(["a"]))
        with pytest.raises(ValueError, match="previous result"):
            chain(word.s(1), upper.s("x")).put()
        with pytest.raises(ValueError, match="first link"):
            chain(upper.s()).put()
        assert t.server.jobs == {}


def test_a_callback_delivered_again_after_it_finished_only_deletes_itself() -> None:
    # As after a crash between a waiting job's re-put and its delete (two copies), or a lost
    # delete: the second delivery finds the first one's outcome and does not run the task.
    app, seen = make_app(middleware=[])
    word, join = app.tasks["word"], app.tasks["join"]
    with app.testing() as t:
        h = group(word.s(1), word.s(2)).then(join.s()).put()
        t.drain()
        again = t.force_retry()
        assert again.action.__class__.__name__ == "Complete" and again.exception is None
        assert int(h) not in t.server.jobs
        assert h.result(timeout=0) == "x-xx"
    assert seen == [["x", "xx"]]
