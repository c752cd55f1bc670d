"""Test helpers: observe a queue server with greenstalk (independent of the code under test)
and wait on conditions with a deadline instead of sleeping."""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

import greenstalk
import pytest

from support import ServerProcess, require_binary, spawn_serving, wait_until

T = TypeVar("T")

wait_for = wait_until  # the suite's one poll-until helper, under the name these tests use


class Probe:
    """A greenstalk connection for looking at the server."""

    def __init__(self, address: str) -> None:
        host, port = address.split(":")
        self.c = greenstalk.Client((host, int(port)), encoding=None)

    def close(self) -> None:
        self.c.close()

    def job(self, job_id: int) -> dict[str, Any] | None:
        try:
            return dict(self.c.stats_job(job_id))
        except greenstalk.NotFoundError:
            return None

    def tube(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.c.stats_tube(name))
        except greenstalk.NotFoundError:
            return None

    def count(self, tube: str, state: str) -> int:
        s = self.tube(tube)
        return int(s[f"current-jobs-{state}"]) if s else 0


def stop_processes(procs: list[subprocess.Popen[bytes]], timeout: float = 30.0) -> None:
    """SIGTERM every process still running, then wait for each (SIGKILL after ``timeout``)."""
    import signal

    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# --- servers ------------------------------------------------------------------------------


def start_server(kind: str, *extra: str, port: int = 0) -> ServerProcess:
    """``kind`` ("beanstalkd" or "stalkd") on 127.0.0.1:``port`` (0, the default, lets the
    kernel choose) with beanstalkd's flags ``extra`` (e.g. ``-b DIR``), once it answers (not
    merely listens: the workers' reply timeouts would run out on stalkd's start-up)."""
    if kind == "beanstalkd":
        cmd = [require_binary("beanstalkd")]
    else:
        if importlib.util.find_spec("stalkd.node.cli") is None:
            pytest.skip("stalkd serve is not built yet (no stalkd.node.cli)")
        cmd = [sys.executable, "-m", "stalkd.cli", "serve"]
    return spawn_serving([*cmd, "-l", "127.0.0.1", "-p", str(port), *extra], what=kind,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(name="server",
                params=[pytest.param("beanstalkd", marks=pytest.mark.beanstalkd), "stalkd"])
def queue_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A fresh queue server: Debian's beanstalkd, then stalkd (same test body for both)."""
    s = start_server(request.param)
    s.kind = request.param  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        s.stop()


@contextlib.contextmanager
def running(app: Any, mode: str = "threads", concurrency: int = 1, **kw: Any) -> Iterator[Any]:
    """A worker of ``app`` running on a thread, stopped (and checked stopped) on exit."""
    from stalkd.worker import make_worker

    w = make_worker(app, mode=mode, concurrency=concurrency, reserve_timeout=1, **kw)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        yield w
    finally:
        w.stop(now=True)
        t.join(timeout=20)
        assert not t.is_alive(), "worker did not stop"
