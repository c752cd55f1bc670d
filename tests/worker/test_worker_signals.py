"""`stalkd worker` as a real process against a real server: SIGKILL and SIGSTOP mid-job (the job
comes back and is done by another worker, never lost), SIGTERM drain with its grace period, and
the second SIGTERM. The task reports progress through files in a state directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from worker_probe import Probe, queue_server, wait_for

from stalkd.worker import App
from support import stop_process

_FIXTURES = (queue_server,)  # the parametrised `server` fixture (beanstalkd, stalkd)


APP_MODULE = '''
import os, pathlib, time
from stalkd.worker import App

app = App(os.environ["STALKD_ADDRESS"])
STATE = pathlib.Path(os.environ["STATE_DIR"])

@app.task(tube="sig", ttr=int(os.environ.get("TASK_TTR", "2")))
def work(p):
    (STATE / f"started-{p}-{os.getpid()}").touch()
    # The workload: run until the test says "go" (or forever).
    while not (STATE / "go").exists():
        time.sleep(0.02)
    (STATE / f"done-{p}").touch()
'''


@pytest.fixture
def env(server: Any, tmp_path: Path) -> Iterator[dict[str, str]]:
    (tmp_path / "sigapp.py").write_text(APP_MODULE)
    state = tmp_path / "state"
    state.mkdir()
    src = str(Path(__file__).resolve().parents[2] / "src")
    yield {**os.environ, "STALKD_ADDRESS": server.address, "STATE_DIR": str(state),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), src, os.environ.get("PYTHONPATH", "")])}


def start_worker(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    logs = Path(env["STATE_DIR"]).parent
    log = logs / f"worker-{len(list(logs.glob('worker-*.log')))}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "stalkd.cli", "worker", "sigapp:app", *args],
                                env=env, cwd=env["STATE_DIR"], stdout=subprocess.DEVNULL,
                                stderr=err)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def log_of(proc: subprocess.Popen[bytes]) -> str:
    return Path(proc.log).read_text()  # type: ignore[attr-defined]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def started(env: dict[str, str], p: int) -> list[Path]:
    return sorted(Path(env["STATE_DIR"]).glob(f"started-{p}-*"))


def only_threads_on_beanstalkd(server: Any, mode: str) -> None:
    # Shutdown is the worker's own logic: every mode runs against stalkd, and the threads
    # variant against beanstalkd too, which keeps this file's run time down.
    if server.kind == "beanstalkd" and mode != "threads":
        pytest.skip("concurrency modes are covered against stalkd")


def put(env: dict[str, str], payload: int) -> int:
    app = App(env["STALKD_ADDRESS"], middleware=[])
    task = app.task(lambda p: None, name="work", tube="sig")
    job_id = task.put(payload, ttr=int(env.get("TASK_TTR", "2")))
    assert job_id is not None
    return job_id


def test_sigkill_mid_job_the_job_is_redelivered_and_done(env: dict[str, str], server: Any) -> None:
    probe = Probe(server.address)
    job_id = put(env, 1)
    first = start_worker(env)
    try:
        # Given a worker in the middle of the job
        wait_for(lambda: started(env, 1), what="job started")
        # When it is killed with SIGKILL
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        # Then the job is back in the queue (released when the dead connection closed)
        wait_for(lambda: (probe.job(job_id) or {}).get("state") == "ready", what="job ready")
        # And another worker completes it
        Path(env["STATE_DIR"], "go").touch()
        second = start_worker(env)
        try:
            wait_for(lambda: probe.job(job_id) is None, what="job deleted")
            assert Path(env["STATE_DIR"], "done-1").exists()
        finally:
            stop(second)
    finally:
        stop(first)
        probe.close()


def test_a_frozen_worker_loses_its_job_after_one_ttr(env: dict[str, str], server: Any) -> None:
    if server.kind == "beanstalkd":
        # Measured here: with the holder's connection idle, 1.12 expires the TTR in only some
        # runs (0 of 3 with reserve-with-timeout 3, 2 of 3 with 1), so the test would be flaky.
        pytest.skip("beanstalkd 1.12 does not reliably expire the TTR of an idle connection's job")
    probe = Probe(server.address)
    job_id = put(env, 2)
    frozen = start_worker(env)
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: started(env, 2), what="job started")
        # When the worker hangs (SIGSTOP: its connection stays open, its heartbeat stops)
        stop_process(frozen.pid)
        Path(env["STATE_DIR"], "go").touch()
        second = start_worker(env)
        # Then after the TTR the server times the job out and the other worker does it
        wait_for(lambda: probe.job(job_id) is None, timeout=30, what="job done by 2nd worker")
        assert len(started(env, 2)) == 2
    finally:
        frozen.send_signal(signal.SIGCONT)
        stop(frozen)
        if second is not None:
            stop(second)
        probe.close()


@pytest.mark.parametrize("mode", ["threads", "asyncio", "processes"])
def test_sigterm_lets_the_in_flight_job_finish_and_reserves_nothing_new(
        env: dict[str, str], server: Any, mode: str) -> None:
    only_threads_on_beanstalkd(server, mode)
    probe = Probe(server.address)
    job_id = put(env, 3)
    proc = start_worker(env, "--grace", "30", "--mode", mode)
    try:
        wait_for(lambda: started(env, 3), what="job started")
        # When SIGTERM arrives mid-job (and was seen: by the child too, with processes),
        # and another job is queued after it
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: log_of(proc).count("draining") >= (2 if mode == "processes" else 1),
                 what="drain log line")
        later = put(env, 4)
        Path(env["STATE_DIR"], "go").touch()
        # Then the worker finishes the in-flight job and exits 0
        assert proc.wait(timeout=30) == 0, log_of(proc)
        assert probe.job(job_id) is None
        # And it never took the new one
        assert (probe.job(later) or {}).get("state") == "ready"
        assert not started(env, 4)
    finally:
        stop(proc)
        probe.close()


@pytest.mark.parametrize("mode", ["threads", "asyncio", "processes"])
@pytest.mark.parametrize("how", ["grace expires", "second SIGTERM"])
def test_sigterm_releases_what_cannot_finish(env: dict[str, str], server: Any, how: str,
                                             mode: str) -> None:
    only_threads_on_beanstalkd(server, mode)
    probe = Probe(server.address)
    env = {**env, "TASK_TTR": "60"}  # so only the worker's release can bring the job back
    job_id = put(env, 5)
    grace = "1" if how == "grace expires" else "600"
    proc = start_worker(env, "--grace", grace, "--mode", mode)
    try:
        wait_for(lambda: started(env, 5), what="job started")
        proc.send_signal(signal.SIGTERM)
        if how == "second SIGTERM":
            # Signals of one kind coalesce until handled: wait until the first was seen.
            wait_for(lambda: log_of(proc).count("draining") >= (2 if mode == "processes" else 1),
                     what="drain log line")
            proc.send_signal(signal.SIGTERM)
        # Then the worker exits 0 and the job is ready again with its attempts untouched
        assert proc.wait(timeout=20) == 0, log_of(proc)
        stats = wait_for(lambda: (s := probe.job(job_id)) and s["state"] == "ready" and s,
                         what="job ready")
        assert stats["releases"] == 0 and stats["timeouts"] == 0
    finally:
        stop(proc)
        probe.close()
