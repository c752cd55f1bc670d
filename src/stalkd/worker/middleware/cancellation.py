"""Cancellation: delivers stop requests (``App.cancel(job_id)`` on a running job) to the
handler running that job. The design is in ``stalkd.worker.cancel``; this is the worker's end.

One daemon thread per worker process, started with the first job and holding one connection of
its own, watches ``stalkd.cancel.<id>`` for each job running in this process, and this
process's wake-up tube, and waits in ``reserve`` (``wait`` seconds at most, then brings its
watch list up to date). A marker reserved there sets ``ctx.cancel_requested`` (what
``cancelled()`` reads) and cancels an async handler's task, and is deleted; a wake-up (put by
``request_stop``) is deleted and the watch list brought up to date at once. Nothing runs in
``app.testing()``, which starts no worker.

A wake-up can come while its job is reserved here but its handler has not started (it names
the job, which is not in the watch list yet): the job id is remembered, and when that job's
``before_process`` comes it puts a wake-up of its own into this process's tube (on a second
connection, opened the first time it is needed), so the thread looks again at once rather than
at its next round. The request itself is still the marker: a remembered id whose marker is gone
(the job ran elsewhere) costs one look and flags nothing.

Ensures: a request for a job whose handler runs in this process reaches it while it runs, also
one made between the job's reserve and its handler's start; a job is never flagged after
``on_handler_exit``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from typing import Any

from stalkd.client import errors
from stalkd.tubes import CANCEL_IDLE_TUBE
from stalkd.worker.cancel import WAKE_BODY, WAKE_PREFIX, cancel_tube
from stalkd.worker.context import JobContext
from stalkd.worker.denied import MAX_PAUSE, Denials
from stalkd.worker.middleware.base import Middleware, RunningWorker

log = logging.getLogger("stalkd.worker")

__all__ = ["Cancellation"]

_IDLE_TUBE = CANCEL_IDLE_TUBE  # watched always: beanstalkd refuses to ignore the last tube
_REMEMBERED = 1024  # wake-ups for jobs not running here (most run elsewhere): the newest kept


class Cancellation(Middleware):
    """Watches the cancel tubes of this process's running jobs (see the module docstring)."""

    def __init__(self, *, wait: int = 1) -> None:
        self.wait = wait
        self.requests = 0
        self._reset()

    def _reset(self) -> None:
        self._address: str | None = None
        self._timeout = 10.0
        self._running: dict[int, JobContext] = {}
        self._woken: dict[int, None] = {}  # wake-ups taken before their job ran here, oldest first
        self._lock = threading.Lock()
        self._waker: Any = None  # the connection before_process wakes the thread through
        self._waker_lock = threading.Lock()
        self._sent: set[int] = set()  # its wake-ups, less those the thread saw taken
        self._started = False
        self._stop = threading.Event()
        self._denials: Denials | None = None  # the worker's: a refusal is said once
        # this process's own (a forked child gets a new one: it runs other jobs)
        self._wake_tube = WAKE_PREFIX + uuid.uuid4().hex

    def on_worker_start(self, worker: RunningWorker) -> None:
        app: Any = getattr(worker, "app", None)
        if app is not None:
            self._address, self._timeout = app.address, app.client_timeout
            self._stop.clear()
        self._denials = getattr(worker, "denials", None)

    def after_fork(self) -> None:
        address, timeout, denials = self._address, self._timeout, self._denials
        self._reset()  # the parent's thread did not survive the fork
        self._address, self._timeout, self._denials = address, timeout, denials

    def on_worker_stop(self, worker: RunningWorker) -> None:
        self._stop.set()
        with self._waker_lock:
            waker, self._waker = self._waker, None
            if waker is not None:
                with self._lock:
                    untaken, self._sent = list(self._sent), set()
                with contextlib.suppress(OSError):
                    for wake in untaken:  # nobody else takes them: leave nothing behind
                        waker.delete(wake)
                    waker.close()

    def before_process(self, ctx: JobContext) -> None:
        if self._address is None:
            return
        with self._lock:
            self._running[ctx.job_id] = ctx
            requested = ctx.job_id in self._woken
            if requested:
                del self._woken[ctx.job_id]
            if not self._started:
                self._started = True
                threading.Thread(target=self._loop, name="stalkd-cancel", daemon=True).start()
        if requested and not self._stop.is_set():
            self._wake(ctx.job_id)

    def _wake(self, job_id: int) -> None:
        """Have the thread bring its watch list up to date now (it took this job's wake-up
        before the job ran here; the marker may be waiting)."""
        from stalkd.worker.ops import ServerOps

        with self._waker_lock:
            try:
                if self._waker is None:
                    assert self._address is not None
                    self._waker = ServerOps(self._address, timeout=self._timeout)
                wake = self._waker.put(self._wake_tube, WAKE_BODY + str(job_id).encode(), 0, 0, 60)
                with self._lock:
                    self._sent.add(wake)
            except errors.PermissionDenied as exc:
                self._refused(f"put into {self._wake_tube}", exc)
            except OSError as exc:
                if self._waker is not None:
                    with contextlib.suppress(OSError):
                        self._waker.abort()
                    self._waker = None
                log.warning("cancellation: could not wake the cancel thread (%s); a request "
                            "for job %d is seen at its next round", exc, job_id)

    def on_handler_exit(self, ctx: JobContext) -> None:
        with self._lock:
            self._running.pop(ctx.job_id, None)

    def _loop(self) -> None:
        from stalkd.worker.ops import ServerOps

        conn: ServerOps | None = None
        watched: set[int] = set()
        pause = 0.0  # after a refusal: 1, 2, 4... s (denied.MAX_PAUSE at most)
        while not self._stop.is_set():
            try:
                if conn is None:
                    assert self._address is not None
                    conn = ServerOps(self._address, timeout=self._timeout + self.wait)
                    conn.watch_only([_IDLE_TUBE, self._wake_tube])
                    watched = set()
                with self._lock:
                    running = set(self._running)
                for job_id in running - watched:
                    conn.client.watch(cancel_tube(job_id))
                for job_id in watched - running:
                    conn.client.ignore(cancel_tube(job_id))
                watched = running
                got = conn.reserve(timeout=self.wait)
                if got is not None:
                    self._deliver(conn, *got)
                pause = 0.0
            except errors.PermissionDenied as exc:
                self._refused(f"{exc.context} (the cancel thread)", exc)
                if conn is not None:
                    with contextlib.suppress(OSError):
                        conn.abort()
                conn = None
                pause = min(MAX_PAUSE, pause * 2 or 1.0)  # waiting for the operator's reload
                self._stop.wait(pause)
            except OSError as exc:
                log.warning("cancellation: connection to %s lost (%s); reconnecting",
                            self._address, exc)
                if conn is not None:
                    with contextlib.suppress(OSError):
                        conn.abort()
                conn = None
                self._stop.wait(1.0)  # reconnect backoff, not synchronisation
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()

    def _refused(self, done: str, exc: BaseException) -> None:
        if self._denials is not None:
            self._denials.report(done, exc)
        else:
            log.error("cancellation: the server's ACL refused %s (%s); cancel requests are not "
                      "seen (docs/access-control.md)", done, exc)

    def _deliver(self, conn: Any, marker: int, body: bytes) -> None:
        if body.startswith(WAKE_BODY):
            with contextlib.suppress(ValueError):
                self._remember(int(body[len(WAKE_BODY):]))
            with self._lock:
                self._sent.discard(marker)
            conn.delete(marker)  # the loop brings the watch list up to date next
            return
        try:
            job_id = int(body)
        except ValueError:
            job_id = -1
        with self._lock:
            ctx = self._running.get(job_id)
            if ctx is not None:
                ctx.cancel_requested = True
                ctx.on_cancel()
        if ctx is None:
            # It ended here since the last watch round, and may run elsewhere now (released
            # for a retry): hand the request back rather than drop it.
            conn.release(marker, 0, 0)
            return
        conn.delete(marker)
        self.requests += 1
        log.info("job %d: asked to stop (cancel requested)", job_id)

    def _remember(self, job_id: int) -> None:
        """A wake-up for ``job_id``: if the job is not running here, it may be reserved here
        with its handler still to start (or run elsewhere): ``before_process`` looks."""
        with self._lock:
            if job_id in self._running:
                return  # the loop's next watch round covers it
            self._woken.pop(job_id, None)
            self._woken[job_id] = None
            while len(self._woken) > _REMEMBERED:
                del self._woken[next(iter(self._woken))]
