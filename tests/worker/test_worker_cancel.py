"""Asking a running job to stop, through a real server: the request reaches the worker that
holds the job (threads, forked processes, asyncio), its handler sees the flag or a
CancelledError, and the job is deleted, not retried nor dead-lettered."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from worker_probe import Probe, queue_server, wait_for
from worker_probe import running as _running

from stalkd.worker import App, cancelled, raise_if_cancelled
from stalkd.worker.cancel import cancel_tube
from stalkd.worker.context import JobContext
from stalkd.worker.middleware import Cancellation, Middleware, Retries

_FIXTURES = (queue_server,)




def running(app: App, mode: str = "threads") -> contextlib.AbstractContextManager[Any]:
    return _running(app, mode, concurrency=2)


@pytest.mark.parametrize("mode", ["threads", "processes", "asyncio"])
def test_a_running_job_asked_to_stop_stops_and_is_deleted(server: Any, tmp_path: Path,
                                                          mode: str) -> None:
    app = App(server.address, middleware=[Retries(), Cancellation()])
    started, stopped = tmp_path / "started", tmp_path / "stopped"  # files: processes mode

    if mode == "asyncio":
        @app.task(max_attempts=3)
        async def long(p: None) -> None:
            started.touch()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                stopped.touch()
                raise
    else:
        @app.task(max_attempts=3)
        def long(p: None) -> None:
            started.touch()
            deadline = time.monotonic() + 120
            while not cancelled() and time.monotonic() < deadline:
                time.sleep(0.01)  # a long job's unit of work
            if cancelled():
                stopped.touch()
            raise_if_cancelled()

    probe = Probe(server.address)
    try:
        job_id = long.put(None)
        assert job_id is not None
        with running(app, mode):
            wait_for(started.exists, what="the handler to start")
            assert app.cancel(job_id, running=True, wait=30)
            assert probe.job(job_id) is None  # gone, not released for a retry
        assert stopped.exists()
        assert probe.count("stalkd.failed", "ready") == 0  # not dead-lettered
        assert probe.count(cancel_tube(job_id), "ready") == 0  # the request was consumed
    finally:
        probe.close()


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_a_request_reaches_a_job_that_started_while_the_cancel_thread_waited(
        server: Any, mode: str) -> None:
    """The cancel thread waits in ``reserve`` for an hour here, so only the request's wake-up
    can bring the new job into its watch list in time."""
    app = App(server.address, middleware=[Cancellation(wait=3600)])
    started = threading.Event()
    saw: list[bool] = []

    @app.task
    def first(p: None) -> None:
        return None

    @app.task
    def long(p: None) -> None:
        started.set()
        deadline = time.monotonic() + 120
        while not cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)  # a long job's unit of work, checking its flag
        saw.append(cancelled())
        raise_if_cancelled()

    probe = Probe(server.address)
    try:
        with running(app, mode):
            # Given the cancel thread started (by a first job) and waiting in reserve
            first.put(None)
            wait_for(lambda: probe.count("first", "ready") + probe.count("first", "reserved") == 0
                     and int((probe.tube("stalkd.cancel.idle") or {}).get("current-waiting", 0)) == 1,
                     what="the cancel thread waiting in reserve")
            # When a job starts after that and is asked to stop
            job_id = long.put(None)
            assert job_id is not None
            assert started.wait(30)
            assert app.cancel(job_id, running=True, wait=30)
            # Then its handler saw the flag and the job is gone, with nothing left behind
            assert probe.job(job_id) is None
        assert saw == [True]
        assert [t for t in probe.c.tubes() if (t.startswith("stalkd.cancel.wake.") or t == cancel_tube(job_id))
                and probe.count(t, "ready")] == []
    finally:
        probe.close()


class Gate(Middleware):
    """Holds each delivery of task ``name`` after its reserve, before the hooks after this one
    and its handler run, until ``go`` is set: the window between reserve and handler start."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.held = threading.Event()
        self.go = threading.Event()

    def before_process(self, ctx: JobContext) -> None:
        if ctx.task.name == self.name:
            self.held.set()
            self.go.wait(60)


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_a_request_made_between_reserve_and_handler_start_reaches_the_handler(
        server: Any, mode: str) -> None:
    """The cancel thread waits in ``reserve`` for an hour: it takes the request's wake-up while
    the job is not running yet, so only a prompt second look (not its next round) reaches it."""
    gate = Gate("long")
    cancellation = Cancellation(wait=3600)
    app = App(server.address, middleware=[Retries(), gate, cancellation])
    saw: list[bool] = []

    @app.task
    def first(p: None) -> None:
        return None

    if mode == "asyncio":
        @app.task(max_attempts=3)
        async def long(p: None) -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                saw.append(True)
                raise
    else:
        @app.task(max_attempts=3)
        def long(p: None) -> None:
            deadline = time.monotonic() + 30  # a bound only: the flag ends the loop
            while not cancelled() and time.monotonic() < deadline:
                time.sleep(0.01)  # a long job's unit of work, checking its flag
            saw.append(cancelled())
            raise_if_cancelled()

    probe = Probe(server.address)
    outcome: list[bool] = []
    try:
        with running(app, mode):
            # Given the cancel thread started (by a first job) and waiting in reserve
            first.put(None)
            wake_tube = cancellation._wake_tube
            wait_for(lambda: int((probe.tube(wake_tube) or {}).get("current-waiting", 0)) == 1
                     and probe.count("first", "ready") + probe.count("first", "reserved") == 0,
                     what="the cancel thread waiting in reserve")
            # and a job reserved whose handler has not started
            job_id = long.put(None)
            assert job_id is not None
            assert gate.held.wait(30)
            # When it is asked to stop, and the cancel thread has taken the wake-up meanwhile
            asking = threading.Thread(
                target=lambda: outcome.append(app.cancel(job_id, running=True, wait=30)))
            asking.start()
            wait_for(lambda: probe.count(cancel_tube(job_id), "ready") == 1
                     and int((probe.tube(wake_tube) or {}).get("cmd-delete", 0)) == 1
                     and probe.count(wake_tube, "ready") + probe.count(wake_tube, "reserved") == 0,
                     what="the request made and its wake-up taken")
            gate.go.set()
            asking.join(90)
            # Then the handler saw the request, and the job is gone, with nothing left behind
            assert outcome == [True]
            assert probe.job(job_id) is None
        assert saw == [True]
        assert probe.count(cancel_tube(job_id), "ready") == 0
        assert probe.count(wake_tube, "ready") == 0
        assert probe.count("stalkd.failed", "ready") == 0
    finally:
        gate.go.set()
        probe.close()


def test_an_async_handler_flagged_before_its_task_exists_is_cancelled() -> None:
    """The cancel thread can flag a job while ``before_process`` runs (the request made
    between reserve and handler start), before there is a task to cancel."""
    from stalkd.worker.aio import run_async
    from stalkd.worker.cancel import JobCancelled
    from stalkd.worker.serializer import Header

    class FlaggedOnStart(Middleware):  # what the cancel thread does, at that moment
        def before_process(self, ctx: JobContext) -> None:
            ctx.cancel_requested = True
            ctx.on_cancel()

    app = App(middleware=[FlaggedOnStart()])

    @app.task
    async def long(p: None) -> None:
        await asyncio.sleep(3600)

    ctx = JobContext(job_id=7, body=b"", task=long, header=Header(task="long"), payload=None,
                     started=0.0)
    asyncio.run(asyncio.wait_for(run_async(app, ctx), 60))  # a bound only: it ends at once
    assert isinstance(ctx.exception, JobCancelled)


def test_cancel_without_running_leaves_a_running_job_alone(server: Any, tmp_path: Path) -> None:
    app = App(server.address, middleware=[Cancellation()])
    started, gate = tmp_path / "started", threading.Event()

    @app.task
    def held(p: None) -> None:
        started.touch()
        gate.wait(60)

    job_id = held.put(None)
    assert job_id is not None
    probe = Probe(server.address)
    try:
        with running(app, "threads"):
            wait_for(started.exists, what="the handler to start")
            assert app.cancel(job_id) is False  # a worker holds it
            assert (probe.job(job_id) or {}).get("state") == "reserved"
            gate.set()
            wait_for(lambda: probe.job(job_id) is None, what="the job to complete")
    finally:
        gate.set()
        probe.close()


def test_cancelling_a_job_that_ended_leaves_no_request_behind(server: Any) -> None:
    app = App(server.address, middleware=[])
    t = app.task(lambda p: None, name="t")
    job_id = t.put(None)
    assert job_id is not None
    assert app.cancel(job_id, running=True) is True   # not started: deleted
    assert app.cancel(job_id, running=True) is False  # no such job
    probe = Probe(server.address)
    try:
        assert probe.tube(cancel_tube(job_id)) is None
    finally:
        probe.close()


def test_cancelled_is_false_outside_a_handler_and_in_testing_mode() -> None:
    app = App(middleware=[Cancellation()])
    seen: list[bool] = []
    t = app.task(lambda p: seen.append(cancelled()), name="t")
    with app.testing(eager=True):
        t.put(None)
    assert seen == [False] and cancelled() is False


def test_stalkd_cancel_stops_a_running_job_and_names_a_missing_one(server: Any,
                                                                    tmp_path: Path) -> None:
    app = App(server.address, middleware=[Cancellation()])
    started = tmp_path / "started"

    @app.task
    def long(p: None) -> None:
        started.touch()
        while not cancelled():
            time.sleep(0.01)
        raise_if_cancelled()

    job_id = long.put(None)
    assert job_id is not None
    with running(app, "threads"):
        wait_for(started.exists, what="the handler to start")
        r = subprocess.run([sys.executable, "-m", "stalkd.cli", "cancel", "-a", server.address,
                            "--wait", "30", str(job_id), "999999"],
                           capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines() == [f"job {job_id}: stopped", "job 999999: not found"]
    assert r.returncode == 1
