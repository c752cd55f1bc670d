"""One delivery pipeline in every mode: middleware see the same hooks in the same order in
threads, processes, asyncio (sync and async handlers) and ``app.testing()``; success is
reported only once the server acknowledged it; an idle worker stops at once."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from worker_probe import Probe, queue_server, wait_for

from stalkd.worker import App, make_worker
from stalkd.worker.actions import GiveUp, RetryLater
from stalkd.worker.context import JobContext
from stalkd.worker.middleware import Middleware, Retries, StructuredLogging

_FIXTURES = (queue_server,)


class FileRecorder(Middleware):
    """Appends ``hook task`` lines to a file (so forked workers are heard too)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def _w(self, hook: str, ctx: JobContext, extra: str = "") -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{ctx.task.name} {hook}{extra}\n".encode())
        finally:
            os.close(fd)

    def before_process(self, ctx: JobContext) -> None:
        self._w("before_process", ctx)

    def on_handler_exit(self, ctx: JobContext) -> None:
        # What a hook here may rely on: the exception is recorded only after every exit hook.
        self._w("on_handler_exit", ctx, f" exception_recorded={ctx.exception is not None}")

    def after_process(self, ctx: JobContext) -> None:
        self._w("after_process", ctx, f" failed={ctx.exception is not None}")

    def on_done(self, ctx: JobContext) -> None:
        self._w("on_done", ctx)

    def on_retry(self, ctx: JobContext, action: RetryLater) -> None:
        self._w("on_retry", ctx)

    def on_dead_letter(self, ctx: JobContext, action: GiveUp) -> None:
        self._w("on_dead_letter", ctx)


EXPECTED = {
    "ok": ["before_process", "on_handler_exit exception_recorded=False", "after_process failed=False",
           "on_done"],
    "bad": ["before_process", "on_handler_exit exception_recorded=False", "after_process failed=True",
            "on_dead_letter"],
}


def _app(address: str, path: Path, asynchronous: bool) -> App:
    app = App(address, middleware=[FileRecorder(path), Retries()])
    if asynchronous:
        async def ok(p: None) -> None:
            return None

        async def bad(p: None) -> None:
            raise ValueError("no")
    else:
        def ok(p: None) -> None:
            return None

        def bad(p: None) -> None:
            raise ValueError("no")
    app.task(ok, name="ok")
    app.task(bad, name="bad", max_attempts=1)  # type: ignore[call-overload]
    return app


def _hooks(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"ok": [], "bad": []}
    if path.exists():
        for line in path.read_text().splitlines():
            task, hook = line.split(" ", 1)
            out[task].append(hook)
    return out


@pytest.mark.parametrize("mode", ["testing", "threads", "processes", "asyncio", "asyncio-async"])
def test_middleware_see_the_same_order_in_every_mode(server: Any, tmp_path: Path, mode: str) -> None:
    # Given one task that succeeds and one that fails for good
    path = tmp_path / "hooks.log"
    app = _app(server.address, path, asynchronous=mode == "asyncio-async")
    if mode == "testing":
        with app.testing() as t:
            app.tasks["ok"].put(None)
            app.tasks["bad"].put(None)
            t.drain()
    else:
        app.tasks["ok"].put(None)
        app.tasks["bad"].put(None)
        w = make_worker(app, mode=mode.split("-")[0], concurrency=1, reserve_timeout=1)
        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        try:
            wait_for(lambda: len(_hooks(path)["ok"]) == 4 and len(_hooks(path)["bad"]) == 4,
                     what="both deliveries")
        finally:
            w.stop(now=True)
            t.join(timeout=20)
    # Then the hooks ran in the one order the pipeline defines
    assert _hooks(path) == EXPECTED


def test_success_is_reported_only_after_the_delete_was_acknowledged(
        caplog: pytest.LogCaptureFixture) -> None:
    # Given a job that is gone from the server while it runs (its TTR ran out and another
    # worker took it, or it was deleted by hand)
    app = App(middleware=[StructuredLogging(per_job=True), Retries()])
    task = app.task(lambda p: None, name="t")

    with app.testing() as t:
        class LoseIt(Middleware):
            def before_process(self, ctx: JobContext) -> None:
                t.server.delete(ctx.job_id)

        app.add_middleware(LoseIt())
        task.put(None)
        with caplog.at_level(logging.INFO, "stalkd.worker"):
            result = t.consume_one()
    # Then no success line was logged, and the lost acknowledgement was
    lines = [r.getMessage() for r in caplog.records]
    assert not any(line.startswith("✓") for line in lines)
    assert any("acknowledgement lost" in line for line in lines)
    assert type(result.action).__name__ == "Complete"


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_an_idle_worker_stops_without_waiting_out_its_reserve(server: Any, mode: str) -> None:
    # Given a worker whose slots wait in a reserve that would last an hour
    app = App(server.address, middleware=[])
    app.task(lambda p: None, name="idle")
    w = make_worker(app, mode=mode, concurrency=2, reserve_timeout=3600)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    probe = Probe(server.address)
    try:
        wait_for(lambda: int(probe.c.stats()["current-waiting"]) == 2, what="two waiting slots")
        # When it is asked to drain
        w.stop()
        # Then it stops, rather than after its reserve timeout
        t.join(timeout=20)
        assert not t.is_alive()
    finally:
        probe.close()


def test_an_acknowledgement_lost_with_the_connection_is_logged_and_not_reported_done(
        caplog: pytest.LogCaptureFixture) -> None:
    # Given a server connection that breaks as the worker deletes a finished job
    app = App(middleware=[StructuredLogging(per_job=True), Retries()])
    task = app.task(lambda p: None, name="t")
    with app.testing() as t:
        task.put(None)

        def broken_delete(job_id: int) -> bool:
            raise ConnectionResetError("server went away")

        t.server.delete = broken_delete  # type: ignore[method-assign]
        # When the job is delivered, Then the error reaches the driver (which reconnects)
        with caplog.at_level(logging.INFO, "stalkd.worker"), pytest.raises(ConnectionResetError):
            t.consume_one()
    # And the log says which acknowledgement was lost, and never that the job was done
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("job 1: acknowledgement (delete) lost") for line in lines)
    assert not any(line.startswith("✓") for line in lines)
