"""The thread driver of the delivery pipeline, and what every concurrency mode shares.

Each slot owns one connection: it reserves, drives ``pipeline.deliver`` for the job, and the
pipeline's calls go to that same connection (beanstalkd only lets the reserving connection act
on a job). Heartbeat touches go through the slot's lock, the only other user of the connection
while the handler runs.

A delivery's last call (its acknowledgement) carries the slot's next reserve in the same write
(``ServerOps.finish``): one round trip per job instead of two.

Ensures: a reserved job is always acted on by its slot, or released by closing the slot's
connection (``stop(now=True)``, grace expiry, or process death), never dropped; after
``stop()`` a slot reserves only in the write that acknowledges its job in flight, and closes
that connection without running what it got; a slot waiting in ``reserve`` when ``stop()`` is
called is woken at once by closing its connection (a job reserved in that instant is not run:
it goes back to ready, its attempts untouched), and a connection is never closed so while the
acknowledgement it carries is unanswered.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from stalkd.client import errors
from stalkd.worker import pipeline, syncrun
from stalkd.worker.denied import BURY_PRIORITY, Denials, Refused, buried, what
from stalkd.worker.ops import Reserved, ServerOps
from stalkd.worker.pipeline import Call, Delivered, Step
from stalkd.worker.registry import Registry
from stalkd.worker.stopflag import StopFlag

log = logging.getLogger("stalkd.worker")

__all__ = ["WorkerBase", "ThreadWorker", "drive"]


def drive(steps: Generator[Step, Any, Delivered], ops: Any, app: Registry,
          lock: threading.Lock | None = None, touch: Callable[[], None] | None = None,
          last: Callable[..., Any] | None = None) -> Delivered:
    """Carry out a delivery's steps on ``ops`` (under ``lock``, shared with heartbeats),
    running the handler on this thread; ``touch`` is the job's thread-safe heartbeat; ``last``
    replaces ``ops.finish`` for the delivery's last call (to reserve the next job with it)."""
    reply: Any = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration as done:
            result: Delivered = done.value
            return result
        if isinstance(step, Call):
            if step.last and last is not None:
                return _last(steps, step, last, lock)
            method = getattr(ops, step.op)
            try:
                if lock is None:
                    reply = method(*step.args)
                else:
                    with lock:
                        reply = method(*step.args)
            except OSError as exc:
                pipeline.call_failed(step, exc)
                raise
            except errors.PermissionDenied as exc:
                raise Refused(what(step.op, step.args)) from exc
        else:
            if touch is not None:
                step.ctx.touch = touch
            syncrun.run_sync(app, step.ctx)
            reply = None


def _last(steps: Generator[Step, Any, Delivered], step: Call, last: Callable[..., Any],
          lock: threading.Lock | None) -> Delivered:
    """The delivery's last call through ``last`` (which reserves the next job with it); the
    rest of the delivery (the hooks told of the acknowledgement) runs as soon as the
    acknowledgement is in, not once the reserve has returned."""
    acked = pipeline.LastAck(steps, step)
    try:
        if lock is None:
            last(*step.args, on_acked=acked)
        else:
            with lock:
                last(*step.args, on_acked=acked)
    except OSError as exc:
        acked.failed(exc)
        raise
    except errors.PermissionDenied as exc:
        raise Refused(what(step.op, step.args)) from exc
    return acked.done[0]


class WorkerBase:
    """What every concurrency mode offers: ``run()`` (blocks, returns an exit code) and
    ``stop(now=False)`` (drain; ``now=True`` releases in-flight jobs at once)."""

    def __init__(self, app: Registry, *, concurrency: int = 1, tubes: Sequence[str] | None = None,
                 grace: float = 30.0, reserve_timeout: int = 1) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.app = app
        self.concurrency = concurrency
        self.tubes = list(tubes) if tubes else app.tubes
        if not self.tubes:
            raise ValueError("the app has no tasks, so there is no tube to watch")
        self.grace = grace
        self.reserve_timeout = reserve_timeout
        # Set by signal handlers (SIGTERM, and a process worker's children): not threading.Event
        self.stopping = StopFlag()
        self.stop_now = StopFlag()
        self.processed = 0
        self._count_lock = threading.Lock()
        self.denials = Denials(self.tubes, str(app.address))

    def stop(self, now: bool = False) -> None:
        self.stopping.set()
        if now:
            self.stop_now.set()

    def _counted(self) -> None:
        with self._count_lock:
            self.processed += 1

    def run(self) -> int:
        raise NotImplementedError


class ThreadWorker(WorkerBase):
    """``concurrency`` threads, each with its own connection.

    >>> from stalkd.worker.app import App
    >>> app = App(middleware=[])
    >>> _ = app.task(lambda p: None, name="noop")
    >>> ThreadWorker(app, concurrency=2).tubes
    ['noop']
    """

    def __init__(self, app: Registry, **kw: Any) -> None:
        super().__init__(app, **kw)
        self._conns: list[ServerOps] = []
        self._idle: set[ServerOps] = set()  # connections waiting in reserve
        self._conns_lock = threading.Lock()

    def _reserve(self, conn: ServerOps) -> tuple[int, bytes] | None:
        with self._conns_lock:
            if self.stopping.is_set():
                return None
            self._idle.add(conn)
        try:
            got = conn.reserve(timeout=self.reserve_timeout)
        finally:
            stopped = self._left_reserve(conn)
        return None if stopped else got

    def _left_reserve(self, conn: ServerOps) -> bool:
        """The slot of ``conn`` leaves its reserve; True if a stop came first. A stop closes
        the connections of slots waiting in reserve (``_wake_idle``), so the server may
        already have given the job just reserved back: running it could run it twice. Such a
        job is left alone, and goes back (untouched) when the slot closes its connection. Taken
        under the lock ``_wake_idle`` lists idle slots with, so a slot that finds no stop here
        is not closed by that stop."""
        with self._conns_lock:
            self._idle.discard(conn)
            return self.stopping.is_set()

    def _finish_and_reserve(self, conn: ServerOps, how: str, job_id: int, priority: int,
                            delay: int, result: Any,
                            on_acked: Callable[[bool], None]) -> tuple[bool, Reserved | None]:
        """The delivery's last call with the next reserve in the same write (one round trip
        per job, not two). Once the acknowledgement is in, the slot counts as waiting in
        reserve: ``stop()`` may then close its connection (``run`` keeps waking such slots
        until they are gone), which hands a job reserved meanwhile back to the server."""

        def idle(acked: bool) -> None:
            on_acked(acked)
            with self._conns_lock:
                self._idle.add(conn)

        try:
            acked, got = conn.finish(how, job_id, priority, delay, result, reserve=True,
                                     timeout=self.reserve_timeout, on_acked=idle)
        finally:
            stopped = self._left_reserve(conn)
        return acked, None if stopped else got

    def _slot(self) -> None:
        conn: ServerOps | None = None
        lock = threading.Lock()
        app = self.app
        got: Reserved | None = None  # the job the last finish reserved
        held: int | None = None  # the job being delivered
        while not self.stopping.is_set():
            try:
                if conn is None:
                    conn = ServerOps(app.address, timeout=app.client_timeout)
                    with self._conns_lock:
                        self._conns.append(conn)
                    try:
                        conn.watch_only(self.tubes)
                    except errors.PermissionDenied as exc:
                        raise Refused(what("watch_only", (self.tubes,))) from exc
                if got is None:
                    try:
                        got = self._reserve(conn)
                    except errors.PermissionDenied as exc:
                        raise Refused(what("reserve", (", ".join(self.tubes),))) from exc
                    if got is None:
                        continue
                job_id, ops, body = got[0], conn, got[1]
                got = None

                def touch(job_id: int = job_id, ops: ServerOps = ops) -> None:
                    with lock:
                        ops.touch(job_id)

                def last(how: str, job_id: int, priority: int, delay: int, result: Any, *,
                         on_acked: Callable[[bool], None], ops: ServerOps = ops) -> None:
                    nonlocal got
                    _, got = self._finish_and_reserve(ops, how, job_id, priority, delay, result,
                                                      on_acked)

                held = job_id
                drive(pipeline.deliver(app, job_id, body), conn, app, lock, touch, last)
                held = None
                self.denials.passed()
                self._counted()
            except Refused as exc:
                got = None
                self.denials.report(exc.done, exc.__cause__ or exc)
                # no job in hand (its watch was refused): the connection goes, watching nothing
                if conn is not None and (held is None or not self._bury_refused(conn, held)):
                    self._forget(conn, abort=True)
                    conn = None
                held = None
                self.stopping.wait(self.denials.pause())  # the operator's reload, not a race
            except Exception as exc:
                got = None  # reserved on the connection closed below: the server releases it
                if self.stopping.is_set() and isinstance(exc, OSError):
                    break
                if isinstance(exc, OSError):
                    log.warning("worker slot: connection to %s lost (%s); reconnecting",
                                app.address, exc)
                else:
                    # A bug or an unexpected server answer: never let it kill the slot. Closing
                    # the connection hands any job we hold back to the server.
                    log.exception("worker slot: unexpected error; reconnecting")
                if conn is not None:
                    self._forget(conn, abort=True)
                conn = None
                self.stopping.wait(0.5)  # back off before reconnecting (also wakes on stop)
        if conn is not None:
            self._forget(conn)  # a job reserved after the stop goes back with the connection

    def _bury_refused(self, conn: ServerOps, job_id: int) -> bool:
        """Bury the job a refusal stopped half-way (running it again would meet the same
        refusal); False if ``conn`` is no longer usable."""
        try:
            if conn.bury(job_id, BURY_PRIORITY):
                buried(job_id)
            return True
        except (OSError, errors.BeanstalkError):
            return False

    def _forget(self, conn: ServerOps, *, abort: bool = False) -> None:
        with self._conns_lock:
            if conn in self._conns:
                self._conns.remove(conn)
        with contextlib.suppress(OSError):
            conn.abort() if abort else conn.close()

    def _wake_idle(self) -> None:
        """Close the connections of slots waiting in reserve, so they see the stop now."""
        with self._conns_lock:
            idle = list(self._idle)
        for conn in idle:
            with contextlib.suppress(OSError):
                conn.abort()

    def run(self) -> int:
        for m in self.app.middleware:
            m.on_worker_start(self)
        threads = [threading.Thread(target=self._slot, name=f"stalkd-slot-{i}", daemon=True)
                   for i in range(self.concurrency)]
        for t in threads:
            t.start()
        try:
            while not self.stopping.wait(0.5):  # a timed wait keeps signal handlers responsive
                pass
            self._wake_idle()
            log.info("draining: no new reservations; in-flight jobs get %.0fs (signal again to "
                     "release them now)", self.grace)
            deadline = time.monotonic() + self.grace
            for t in threads:
                while t.is_alive() and not self.stop_now.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    t.join(timeout=min(left, 0.1))
                    self._wake_idle()  # slots that finished a job since and now reserve
        finally:
            # Whatever is still in flight is released by closing its connection.
            with self._conns_lock:
                leftover = list(self._conns)
            for conn in leftover:
                self._forget(conn, abort=True)
            for m in self.app.middleware:
                m.on_worker_stop(self)
        busy = sum(t.is_alive() for t in threads)
        if busy:
            log.warning("stopped with %d job(s) still running; released them to the server", busy)
        log.info("stopped after %d job(s)", self.processed)
        return 0
