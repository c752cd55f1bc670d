"""A stop that closes a slot's connection in the instant its reserve returned a job.

The thread worker wakes slots waiting in ``reserve`` by closing their connections, which hands
what they reserved back to the server. A job that arrives as the connection is closed must then
not be run as well: the server has it back, ready for another worker, so it would run twice.
The instant is made deterministic at the worker's network boundary (``ServerOps``): its reserve
returns the real server's job only once the stop has closed that connection.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from worker_probe import Probe, queue_server

from stalkd.worker import App, runner
from stalkd.worker.ops import Reserved, ServerOps
from stalkd.worker.runner import ThreadWorker

_FIXTURES = (queue_server,)  # the parametrised `server` fixture (beanstalkd, stalkd)


@pytest.fixture
def probe(server: Any) -> Iterator[Probe]:
    p = Probe(server.address)
    yield p
    p.close()


class StopWhenReserved:
    """Makes a slot's connection, once ``on`` names the call, stop the worker as soon as that
    call has a job, and hand the job over only after the stop has closed the connection."""

    def __init__(self, on: str) -> None:
        self.on = on
        self.worker: ThreadWorker | None = None
        self.aborted = threading.Event()
        self.fired = threading.Event()

    def ops_class(self) -> type[ServerOps]:
        hook = self

        class Ops(ServerOps):
            def reserve(self, timeout: float | None) -> Reserved | None:
                got = super().reserve(timeout)
                return hook.stopped(got) if hook.on == "reserve" else got

            def finish(self, *args: Any, **kw: Any) -> tuple[bool, Reserved | None]:
                acked, got = super().finish(*args, **kw)
                return (acked, hook.stopped(got) if hook.on == "finish" else got)

            def abort(self) -> None:
                super().abort()
                hook.aborted.set()

        return Ops

    def stopped(self, got: Reserved | None) -> Reserved | None:
        if got is None or self.fired.is_set() or self.worker is None:
            return got
        self.fired.set()
        self.worker.stop()
        # The run loop sees the stop and closes the connections of slots waiting in reserve,
        # this one included (it is still inside its reserve).
        assert self.aborted.wait(20), "the stop did not close the reserving connection"
        return got


@pytest.mark.parametrize("on", ["reserve", "finish"])
def test_a_job_reserved_as_the_stop_closes_its_connection_is_released_not_run(
        server: Any, probe: Probe, on: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a worker whose slot gets a job (from its reserve, or from the reserve sent with the
    # acknowledgement of the job before) just as a stop closes its connection
    hook = StopWhenReserved(on)
    monkeypatch.setattr(runner, "ServerOps", hook.ops_class())
    app = App(server.address, middleware=[])
    ran: list[int] = []
    task = app.task(ran.append, name="s")
    first = task.put(1) if on == "finish" else None
    last = task.put(2)
    assert last is not None
    worker = ThreadWorker(app, concurrency=1, reserve_timeout=1)
    hook.worker = worker
    # When the worker runs until it stops
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive(), "worker did not stop"
    assert hook.fired.is_set()
    # Then that job was not run: the server has it back, ready, never released by the worker
    assert ran == ([1] if first is not None else [])
    stats = probe.job(last) or {}
    assert (stats.get("state"), stats.get("releases")) == ("ready", 0)
    if first is not None:
        assert probe.job(first) is None
