"""The worker's command-line entry points, run as real processes: clear errors, no tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from support import ServerProcess


def stalkd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stalkd.cli", *args], capture_output=True,
                          text=True, timeout=60)


def test_worker_help_lists_the_modes() -> None:
    r = stalkd("worker", "--help")
    assert r.returncode == 0
    assert "--concurrency" in r.stdout and "processes" in r.stdout and "--grace" in r.stdout


def test_worker_with_a_missing_module_says_so() -> None:
    r = stalkd("worker", "no_such_module_xyz:app")
    assert r.returncode != 0
    assert "cannot import 'no_such_module_xyz'" in r.stderr and "Traceback" not in r.stderr


def test_failed_and_retry_without_a_server_fail_cleanly(held_port: int) -> None:
    address = f"127.0.0.1:{held_port}"  # bound, never listening: connecting is refused
    for cmd in (["failed"], ["retry", "--all"]):
        r = stalkd(*cmd, "--address", address)
        assert r.returncode == 1, r.stderr
        assert address in r.stderr and "Traceback" not in r.stderr


def test_failed_and_retry_read_stalkd_addr_and_take_port(beanstalkd: ServerProcess) -> None:
    # issue 15: both ignored $STALKD_ADDR (and went to 127.0.0.1:11300) and rejected --port
    env = {**os.environ, "STALKD_ADDR": beanstalkd.address}
    for cmd in (["failed"], ["retry", "--all"]):
        r = subprocess.run([sys.executable, "-m", "stalkd.cli", *cmd], capture_output=True,
                           text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        r = stalkd(*cmd, "--port", str(beanstalkd.port))
        assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "stalkd.cli", "failed"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert f"0 dead-lettered job(s) in stalkd.failed on {beanstalkd.address}" in r.stderr


def test_retry_needs_ids_or_all() -> None:
    r = stalkd("retry")
    assert r.returncode == 2 and "give job ids or --all" in r.stderr


def test_bad_numbers_and_log_levels_are_usage_errors(tmp_path: Any) -> None:
    # Given an importable app, When an option is out of range, Then a usage error, not a
    # traceback (nor, for --threads-per-process 0, a child respawned forever)
    (tmp_path / "cli_app.py").write_text(
        "from stalkd.worker import App\napp = App()\napp.task(lambda p: None, name='t')\n")
    cases = [(["-c", "0"], "must be at least 1"), (["--log-level", "foo"], "'foo' is not one of"),
             (["-m", "processes", "--threads-per-process", "0"], "must be at least 1")]
    for flags, message in cases:
        r = subprocess.run([sys.executable, "-m", "stalkd.cli", "worker", "cli_app:app", *flags],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert r.returncode == 2, (flags, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr


def test_a_process_worker_refuses_zero_threads_per_process() -> None:
    from stalkd.worker import App
    from stalkd.worker.procs import ProcessWorker

    app = App(middleware=[])
    app.task(lambda p: None, name="t")
    with pytest.raises(ValueError, match="threads per process must be >= 1"):
        ProcessWorker(app, threads=0)
