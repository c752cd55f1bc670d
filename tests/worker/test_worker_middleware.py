"""Built-in middleware seen through the in-process broker: hook order, Prometheus metrics,
structured log lines, and that a broken hook cannot decide a job's fate."""

from __future__ import annotations

import contextlib
import logging

import pytest
from prometheus_client import CollectorRegistry

from stalkd.worker import App, Backoff
from stalkd.worker.actions import GiveUp, RetryLater
from stalkd.worker.context import JobContext
from stalkd.worker.middleware import Metrics, Middleware, Retries, StructuredLogging


class Trace(Middleware):
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def before_process(self, ctx: JobContext) -> None:
        self.log.append(f"{self.name}.before")

    def after_process(self, ctx: JobContext) -> None:
        self.log.append(f"{self.name}.after")

    def on_retry(self, ctx: JobContext, action: RetryLater) -> None:
        self.log.append(f"{self.name}.retry")

    def on_dead_letter(self, ctx: JobContext, action: GiveUp) -> None:
        self.log.append(f"{self.name}.dead")


def test_hooks_run_in_order_before_and_in_reverse_after() -> None:
    log: list[str] = []
    app = App(middleware=[Trace("outer", log), Retries(rng=lambda: 0.0), Trace("inner", log)])

    @app.task(max_attempts=2)
    def fails(p: None) -> None:
        log.append("run")
        raise ValueError("no")

    with app.testing() as t:
        fails.put(None)
        t.drain()
    assert log == ["outer.before", "inner.before", "run", "inner.after", "outer.after",
                   "outer.retry", "inner.retry",
                   "outer.before", "inner.before", "run", "inner.after", "outer.after",
                   "outer.dead", "inner.dead"]


def test_a_broken_hook_is_logged_and_the_job_still_completes(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Middleware):
        def after_process(self, ctx: JobContext) -> None:
            raise RuntimeError("metrics backend down")

    app = App(middleware=[Retries(), Broken()])
    task = app.task(lambda p: None, name="t")
    with app.testing() as t, caplog.at_level(logging.ERROR, "stalkd.worker"):
        task.put(1)
        assert type(t.consume_one().action).__name__ == "Complete"
    assert "middleware hook" in caplog.text and "metrics backend down" in caplog.text


def test_metrics_count_outcomes_retries_and_dead_letters() -> None:
    registry = CollectorRegistry()
    app = App(middleware=[Retries(rng=lambda: 0.0), Metrics(registry=registry)])
    ok = app.task(lambda p: None, name="ok")

    @app.task(max_attempts=3, backoff=Backoff(jitter=0))
    def bad(p: None) -> None:
        raise OSError("disk")

    with app.testing() as t:
        ok.put(None)
        ok.put(None)
        bad.put(None)
        t.drain()

    def value(name: str, **labels: str) -> float:
        v = registry.get_sample_value(name, labels)
        return 0.0 if v is None else v

    assert value("stalkd_worker_jobs_total", task="ok", outcome="done") == 2
    assert value("stalkd_worker_jobs_total", task="bad", outcome="failed") == 3
    assert value("stalkd_worker_retries_total", task="bad") == 2
    assert value("stalkd_worker_dead_letters_total", task="bad") == 1
    assert value("stalkd_worker_job_duration_seconds_count", task="ok") == 2
    assert value("stalkd_worker_jobs_in_progress", task="ok") == 0


def test_log_lines_carry_job_tube_task_attempt_and_duration(caplog: pytest.LogCaptureFixture) -> None:
    app = App(middleware=[StructuredLogging(per_job=True), Retries(rng=lambda: 0.0)])
    ok = app.task(lambda p: None, name="send", tube="emails")

    @app.task(tube="emails", max_attempts=2, backoff=Backoff(base=3, jitter=0))
    def flaky(p: None) -> None:
        raise TimeoutError("smtp")

    with app.testing() as t, caplog.at_level(logging.INFO, "stalkd.worker"):
        ok.put(None)
        flaky.put(None)
        t.drain()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("✓ job=1 tube=emails task=send ms=")  # attempt unknown: omitted
    assert lines[1].startswith("↻ job=2 tube=emails task=flaky attempt=1 ms=")
    assert lines[1].endswith('retry_in=3s error="TimeoutError: smtp"')
    assert lines[2].startswith("✗ job=2 tube=emails task=flaky attempt=2 ms=")
    rec = caplog.records[2]
    assert (rec.job_id, rec.tube, rec.task, rec.attempt) == (2, "emails", "flaky", 2)  # type: ignore[attr-defined]
    assert rec.duration_ms >= 0  # type: ignore[attr-defined]


def test_per_job_lines_are_opt_in_and_a_periodic_summary_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    # Given the default logging middleware and a clock the test moves
    now = [0.0]
    app = App(middleware=[StructuredLogging(summary_every=10, clock=lambda: now[0]), Retries()])
    task = app.task(lambda p: None, name="t")
    with app.testing() as t, caplog.at_level(logging.INFO, "stalkd.worker"):
        task.put_many([1, 2, 3])
        t.drain()
        # Then no line per job at INFO
        assert [r.getMessage() for r in caplog.records] == []
        # When the summary interval has passed and one more job completes
        now[0] = 10.0
        task.put(4)
        t.drain()
    # Then one summary line counts the jobs and gives the rate
    assert [r.getMessage() for r in caplog.records] == ["⌁ 4 done, 0 retried, 0 dead, 0 cancelled in 10.0s (0.4 jobs/s)"]


def test_metrics_are_served_over_http_on_loopback(caplog: pytest.LogCaptureFixture) -> None:
    import urllib.request

    with caplog.at_level(logging.INFO, "stalkd.worker"):
        m = Metrics(registry=CollectorRegistry(), port=0)
    try:
        # Then the port the kernel chose is logged
        assert f"serving /metrics on http://127.0.0.1:{m.port}" in caplog.text
        app = App(middleware=[m])
        task = app.task(lambda p: None, name="scraped")
        with app.testing() as t:
            task.put(None)
            t.drain()
        assert m.port is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{m.port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert 'stalkd_worker_jobs_total{outcome="done",task="scraped"} 1.0' in text
    finally:
        m.close()


def test_a_forked_childs_gauge_stops_counting_once_it_exits_even_unreaped() -> None:
    import os

    registry = CollectorRegistry()
    m = Metrics(registry=registry)
    m.before_fork(None)  # type: ignore[arg-type]  # (the worker: unused by Metrics)
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one job in progress, one done, written to its file
        code = 1
        try:
            os.close(to_child_w)
            m.after_fork()
            m.in_progress.labels(task="t").inc()
            m.jobs.labels(task="t", outcome="done").inc()
            m.on_worker_stop(None)  # type: ignore[arg-type]
            os.write(from_child_w, b"k")
            os.read(to_child_r, 1)  # until the parent closes its end
            code = 0
        finally:
            os._exit(code)
    os.close(to_child_r)
    os.close(from_child_w)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    try:
        assert os.read(from_child_r, 1) == b"k"
        # While the child runs, its gauge and its counter count
        assert value("stalkd_worker_jobs_in_progress", task="t") == 1.0
        assert value("stalkd_worker_jobs_total", task="t", outcome="done") == 1.0
        # When it has exited, but is not reaped yet (a zombie)
        os.close(to_child_w)
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        # Then its gauge no longer counts, and its counter still does
        assert value("stalkd_worker_jobs_in_progress", task="t") in (None, 0.0)
        assert value("stalkd_worker_jobs_total", task="t", outcome="done") == 1.0
    finally:
        with contextlib.suppress(OSError):
            os.close(to_child_w)
        os.close(from_child_r)
        _, status = os.waitpid(pid, 0)
        m.close()
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_cancelled_job_is_logged_and_counted_as_cancelled_not_done(
        caplog: pytest.LogCaptureFixture) -> None:
    from stalkd.worker.cancel import JobCancelled

    # Given a job that stops on request and one that completes
    now = [0.0]
    app = App(middleware=[StructuredLogging(summary_every=10, clock=lambda: now[0]), Retries()])

    def stop(p: None) -> None:
        raise JobCancelled("asked to stop")

    stopped = app.task(stop, name="stopped")
    fine = app.task(lambda p: None, name="fine")
    with app.testing() as t, caplog.at_level(logging.INFO, "stalkd.worker"):
        stopped.put(None)
        t.drain()
        now[0] = 10.0
        fine.put(None)
        t.drain()
    lines = [r.getMessage() for r in caplog.records]
    # Then the cancelled one has its own glyph, and the summary counts it apart from the done
    assert lines[0].startswith("⊘ job=1 tube=") and lines[0].endswith(" cancelled"), lines
    assert not any(ln.startswith("✓") for ln in lines)
    assert lines[-1].startswith("⌁ 1 done, 0 retried, 0 dead, 1 cancelled in 10.0s"), lines
