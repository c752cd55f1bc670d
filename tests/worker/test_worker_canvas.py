"""Groups and chains through a real stalkd server: results flow from members to the callback
and from link to link, a worker killed with SIGKILL in the middle loses nothing and puts
nothing twice (every job was put by the producer), and a failed member holds the callback back.
Worker processes are started and killed by PID; the tasks report through files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from worker_probe import running, start_server, wait_for

from stalkd.client import Client
from stalkd.worker import App, JobContext, Middleware
from stalkd.worker.canvas import chain, group
from stalkd.worker.results import TaskFailed

APP_MODULE = '''
import os, pathlib, time
from stalkd.worker import App

app = App(os.environ["STALKD_ADDRESS"])
STATE = pathlib.Path(os.environ["STATE_DIR"])

@app.task(tube="square", ttr=2, max_attempts=1, depends_poll=3600)
def square(n):
    (STATE / f"ran-square-{n}-{os.getpid()}").touch()
    if n == 3:  # the slow member: runs until the test says "go"
        while not (STATE / "go").exists():
            time.sleep(0.02)
    if n < 0:
        raise ValueError(f"negative {n}")
    return n * n

@app.task(tube="total", depends_poll=3600)
def total(ns):
    (STATE / f"ran-total-{os.getpid()}-{time.monotonic_ns()}").touch()
    return sum(ns)

@app.task(tube="inc", depends_poll=3600)
def inc(n):
    return n + 1
'''


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    server = start_server("stalkd")
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / "canvasapp.py").write_text(APP_MODULE)
    (tmp_path / "state").mkdir()
    e = dict(os.environ, STALKD_ADDRESS=server.address, STATE_DIR=str(tmp_path / "state"),
             PYTHONPATH=f"{tmp_path / 'mod'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    try:
        yield e
    finally:
        server.stop()


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "stalkd.cli", "worker", "canvasapp:app", "-c", "4"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def producer(env: dict[str, str]) -> tuple[App, Any, Any, Any]:
    """The same tasks, declared by the producer (bodies never run here)."""
    app = App(env["STALKD_ADDRESS"])

    @app.task(tube="square", ttr=2, max_attempts=1)
    def square(n: int) -> int: ...

    @app.task(tube="total")
    def total(ns: list[int]) -> int: ...

    @app.task(tube="inc")
    def inc(n: int) -> int: ...

    return app, square, total, inc


def test_a_worker_killed_mid_group_loses_no_callback_and_runs_it_once(env: dict[str, str]) -> None:
    state = Path(env["STATE_DIR"])
    _, square, total, _ = producer(env)
    h = group(square.s(1), square.s(2), square.s(3)).then(total.s()).put()
    assert h.status() in ("ready", "delayed", "reserved", "waiting", "unknown")
    first = start_worker(env)
    try:
        # Given a worker in the middle of the slow member (the others done)
        wait_for(lambda: any(state.glob("ran-square-3-*")), what="slow member started")
        # When it is killed
        first.kill()
        first.wait()
    finally:
        stop(first)
    (state / "go").touch()
    second = start_worker(env)
    try:
        # Then another worker finishes the member, and the callback runs with every result
        assert h.result(timeout=60) == 1 + 4 + 9
    finally:
        stop(second)
    assert len(list(state.glob("ran-total-*"))) == 1  # the callback ran once
    assert h.status() == "done"


def test_a_chain_passes_each_result_on_and_a_failed_member_holds_the_callback(env: dict[str, str]) -> None:
    (Path(env["STATE_DIR"]) / "go").touch()
    _, square, total, inc = producer(env)
    c = chain(square.s(4), inc.s(), inc.s(), square.s()).put()
    held = group(square.s(2), square.s(-1)).then(total.s()).put()
    w = start_worker(env)
    try:
        assert c.result(timeout=60) == (16 + 2) ** 2
        # the failed member is buried: the callback waits for it instead of running without it
        with Client(env["STALKD_ADDRESS"]) as cl:
            wait_for(lambda: cl.stats_tube("square")["current-jobs-buried"] == 1, what="member buried")
        assert held.status() in ("waiting", "ready", "delayed", "reserved")
        with pytest.raises(TimeoutError):
            held.result(timeout=1.5)
    finally:
        stop(w)


def test_a_member_that_failed_for_good_reads_as_failed_with_its_error(env: dict[str, str]) -> None:
    _, square, total, _ = producer(env)
    members = group(square.s(-5)).put()
    with Client(env["STALKD_ADDRESS"]) as cl:
        w = start_worker(env)
        try:
            wait_for(lambda: cl.stats_tube("square")["current-jobs-buried"] == 1, what="member buried")
        finally:
            stop(w)
    with pytest.raises(TaskFailed, match="ValueError: negative -5"):
        members[0].result(timeout=5)


class Waits(Middleware):
    """Counts the deliveries deferred because a dependency was pending, and the links run."""

    def __init__(self) -> None:
        self.waits = 0
        self.ran: list[int] = []

    def on_deferred(self, ctx: JobContext, delay: int) -> None:
        self.waits += delay == NEVER  # not a copy looking again a second later (Recheck)

    def after_process(self, ctx: JobContext) -> None:
        self.ran.append(ctx.payload)


NEVER = 3600  # a waiting link's delay: it only starts in time if the step before wakes it


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_each_chain_step_wakes_the_next_without_polling(env: dict[str, str], mode: str) -> None:
    waits = Waits()
    app = App(env["STALKD_ADDRESS"], middleware=[waits])

    @app.task(tube="step", depends_poll=NEVER)
    def step(n: int) -> int:
        return n + 1

    # Given five links reserved by five slots at once (four of them must wait)
    h = chain(step.s(0), step.s(), step.s(), step.s(), step.s()).put()
    with running(app, mode=mode, concurrency=5):
        # Then each completion wakes the next link: none waits out its delay
        assert h.result(timeout=60) == 5
    assert waits.waits <= 4  # each link waited at most once, for the link before it
    assert waits.ran == [0, 1, 2, 3, 4]
    with Client(env["STALKD_ADDRESS"]) as c:  # nothing left behind: no waiter, no marker
        assert [t for t in c.list_tubes() if t.startswith(("stalkd.wait.", "stalkd.key."))] == []
