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
from stalkd.worker.middleware import Cancellation, Retries

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
