"""Task results through real servers: stalkd keeps them (durably, across a kill -9), Debian's
beanstalkd cannot (a clear error naming the SQL backend), and the SQL backend (SQLite, and a
real PostgreSQL) serves either. Workers run in a thread of the test process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from worker_probe import running as _running
from worker_probe import start_server, wait_for

from stalkd.client import Client, errors
from stalkd.worker import App
from stalkd.worker.results import MemoryResults, ResultsUnsupported, ServerResults, TaskFailed
from stalkd.worker.sqlresults import SqlResults


def running(app: App, mode: str = "threads") -> contextlib.AbstractContextManager[Any]:
    return _running(app, mode, concurrency=2)


@pytest.fixture
def stalkd_server() -> Iterator[Any]:
    s = start_server("stalkd")
    try:
        yield s
    finally:
        s.stop()


def _tasks(app: App) -> tuple[Any, Any]:
    @app.task(tube="add", result_ttl=300)
    def add(p: dict[str, int]) -> int:
        return p["a"] + p["b"]

    @app.task(tube="boom", result_ttl=300, max_attempts=1)
    def boom(p: int) -> None:
        raise KeyError(f"no order {p}")

    return add, boom


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_results_and_failures_come_back_from_the_stalkd_server(stalkd_server: Any, mode: str) -> None:
    app = App(stalkd_server.address, middleware=[])
    add, boom = _tasks(app)
    ok = add.put({"a": 2, "b": 3})
    bad = boom.put(17)
    assert ok is not None and bad is not None
    assert ok.status() == "ready"
    with running(app, mode):
        assert ok.result(timeout=20) == 5
        with pytest.raises(TaskFailed) as failed:
            bad.result(timeout=20)
        # the job is gone (deleted) or buried, and the status says how it ended (the outcome
        # is stored before the bury: wait for it, before the worker stops)
        assert ok.status() == "done"
        wait_for(lambda: bad.status() == "buried", what="bury after the stored failure")
    assert failed.value.error_type == "KeyError" and "no order 17" in failed.value.message
    assert "raise KeyError" in failed.value.traceback
    with Client(stalkd_server.address) as c, pytest.raises(errors.NotFound):
        c.stats_job(int(ok))  # the record is gone, the result lives


def test_aresult_waits_without_blocking_the_loop(stalkd_server: Any) -> None:
    app = App(stalkd_server.address, middleware=[])
    add, _ = _tasks(app)

    async def main() -> tuple[int, int]:
        h = await add.aput({"a": 40, "b": 2})
        ticks = 0

        async def count() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        counter = asyncio.ensure_future(count())
        value = await h.aresult(timeout=20)
        counter.cancel()
        return value, ticks

    with running(app):
        value, ticks = asyncio.run(main())
    assert value == 42 and ticks > 0


def test_result_times_out_while_nobody_runs_the_job(stalkd_server: Any) -> None:
    app = App(stalkd_server.address, middleware=[])
    add, _ = _tasks(app)
    h = add.put({"a": 1, "b": 1})
    assert h is not None
    with pytest.raises(TimeoutError, match="status: ready"):
        h.result(timeout=0.2)


def test_a_stored_result_survives_kill_9_of_the_server(tmp_path: Path) -> None:
    s = start_server("stalkd", "-b", str(tmp_path))
    try:
        with Client(s.address) as c:
            jid = c.put(b"x")
            c.reserve_job(jid)  # only the connection holding the job stores its result
            c.result_put(jid, 600, b"kept")
            c.delete(jid)
        os.kill(s.proc.pid, signal.SIGKILL)
        s.proc.wait()
    finally:
        s.stop()
    s = start_server("stalkd", "-b", str(tmp_path))
    try:
        with Client(s.address) as c:
            assert c.result_get(jid) == b"kept"
            with pytest.raises(errors.NotFound):
                c.result_get(jid + 1)
    finally:
        s.stop()


@pytest.mark.beanstalkd
def test_beanstalkd_has_no_results_and_the_error_names_the_alternative(beanstalkd: Any) -> None:
    backend = ServerResults(beanstalkd.address)
    with pytest.raises(ResultsUnsupported, match=r"SqlResults\('sqlite:///"):
        backend.fetch(1)
    with Client(beanstalkd.address) as c, pytest.raises(ResultsUnsupported, match="UNKNOWN_COMMAND to result-put"):
        backend.store(c.put(b"x"), b"v", 60, via=c)


@pytest.mark.beanstalkd
def test_stalkd_worker_refuses_to_start_on_beanstalkd_when_tasks_keep_results(beanstalkd: Any,
                                                                              tmp_path: Path) -> None:
    (tmp_path / "res_app.py").write_text(
        "import os\nfrom stalkd.worker import App\napp = App(os.environ['ADDR'])\n"
        "app.task(lambda p: 1, name='t', result_ttl=60)\n")
    r = subprocess.run([sys.executable, "-m", "stalkd.cli", "worker", "res_app:app"], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path, env=dict(os.environ, ADDR=beanstalkd.address))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "does not keep results" in r.stderr and "SqlResults" in r.stderr


@pytest.mark.beanstalkd
def test_the_sql_backend_keeps_results_of_jobs_on_beanstalkd(beanstalkd: Any, tmp_path: Path) -> None:
    app = App(beanstalkd.address, middleware=[], results=SqlResults(f"sqlite:///{tmp_path}/r.db"))
    add, boom = _tasks(app)
    ok, bad = add.put({"a": 1, "b": 2}), boom.put(3)
    assert ok is not None and bad is not None
    with running(app):
        assert ok.result(timeout=20) == 3
        with pytest.raises(TaskFailed, match="KeyError"):
            bad.result(timeout=20)
        # the result is stored before the job is deleted, and a stop now hands a job not yet
        # deleted back to beanstalkd: wait for the delete before stopping
        wait_for(lambda: ok.host.job_state(int(ok)) is None, what="the delete after the stored result")
    assert ok.status() == "done"


def test_a_backend_that_cannot_store_is_logged_and_the_job_still_ends(stalkd_server: Any,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    class Broken(MemoryResults):
        def store(self, job_id: int, data: bytes, ttl: float, *, via: Any = None) -> None:
            raise RuntimeError("database is read-only")

    app = App(stalkd_server.address, middleware=[], results=Broken())
    add, _ = _tasks(app)
    h = add.put({"a": 1, "b": 1})
    assert h is not None
    with running(app):
        wait_for(lambda: h.status() == "unknown", what="job deleted")
    assert "result not stored: database is read-only" in caplog.text


def test_testing_mode_keeps_results_in_memory() -> None:
    app = App(middleware=[])
    add, boom = _tasks(app)
    with app.testing(raise_errors=False) as t:
        h, f = add.put({"a": 5, "b": 6}), boom.put(1)
        assert h is not None and f is not None
        t.drain()
        assert h.result(timeout=0) == 11 and h.status() == "done"
        with pytest.raises(TaskFailed):
            f.result(timeout=0)


def test_memory_results_expire_by_the_injected_clock() -> None:
    now = [100.0]
    r = MemoryResults(clock=lambda: now[0])
    r.store(1, b"a", ttl=10)
    now[0] = 109.9
    assert r.fetch(1) == b"a"
    now[0] = 110.0
    assert r.fetch(1) is None
