"""Running tasks: the worker loop with thread slots, and what is shared by every concurrency mode.

Each slot owns one connection: it reserves, runs the handler, then deletes / releases / buries
on that same connection (beanstalkd only lets the reserving connection do so). A job's heartbeat
touches go through the slot's lock, the only other user of the connection while the handler runs.

Ensures: a reserved job is always acted on by its slot, or released by closing the slot's
connection (``stop(now=True)``, grace expiry, or process death), never dropped; a slot never
reserves after ``stop()`` was called.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stalkd.worker import core, unique
from stalkd.worker.context import Action, Bury, Defer, Delete, JobContext, Release
from stalkd.worker.deadletter import RECORD_PRIORITY

if TYPE_CHECKING:
    from stalkd.worker.app import App
    from stalkd.worker.conn import Conn

log = logging.getLogger("stalkd.worker")

__all__ = ["WorkerBase", "ThreadWorker", "execute", "process_job"]


class WorkerBase:
    """What every concurrency mode offers: ``run()`` (blocks, returns an exit code) and
    ``stop(now=False)`` (drain; ``now=True`` releases in-flight jobs at once)."""

    def __init__(self, app: App, *, concurrency: int = 1, tubes: Sequence[str] | None = None,
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
        self.stopping = threading.Event()
        self.stop_now = threading.Event()
        self.processed = 0
        self._count_lock = threading.Lock()

    def stop(self, now: bool = False) -> None:
        self.stopping.set()
        if now:
            self.stop_now.set()

    def _counted(self) -> None:
        with self._count_lock:
            self.processed += 1

    def run(self) -> int:
        raise NotImplementedError


def execute(conn: Conn, app: App, job_id: int, ctx: JobContext | None, action: Action) -> bool:
    """Carry out ``action`` for reserved job ``job_id`` on its connection. False when the
    server no longer had the job reserved for us (its TTR ran out, so it went back to ready
    and may be running elsewhere: at-least-once delivery)."""
    ok = True
    if isinstance(action, Delete):
        ok = conn.delete(job_id)
        if ok and ctx is not None and ctx.header.marker is not None:
            conn.delete(ctx.header.marker)  # frees the unique key
    elif isinstance(action, Release):
        ok = conn.release(job_id, priority=action.priority, delay=action.delay)
    elif isinstance(action, Bury):
        # Record first: if we die before the bury, the job times out and fails again.
        conn.put(app.failed_tube, action.record.to_json(), priority=RECORD_PRIORITY, delay=0,
                 ttr=120)
        ok = conn.bury(job_id, priority=action.priority)
    elif isinstance(action, Defer):
        assert ctx is not None
        # New copy first, then delete: a crash in between duplicates, never loses.
        conn.put(ctx.tube, ctx.body, priority=ctx.task.priority, delay=action.delay,
                 ttr=ctx.ttr)
        ok = conn.delete(job_id)
    if not ok:
        log.warning("job %d: no longer reserved by this worker when acting on it (%s); its TTR "
                    "ran out, so it may run again elsewhere", job_id, type(action).__name__)
    return ok


def process_job(app: App, conn: Conn, lock: threading.Lock, job_id: int, body: bytes,
                tube: str | None = None) -> Action:
    """One delivery on a sync slot: decode, check dependencies, run, decide, act, notify."""
    try:
        ctx = core.begin(app, job_id, body, tube=tube)
    except Exception as exc:
        action: Action = core.undecodable(job_id, body, exc, now=time.time())
        with lock:
            execute(conn, app, job_id, None, action)
        log.error("✗ job=%d undecodable, buried: %s", job_id, exc)
        return action

    def touch() -> None:
        with lock:
            conn.touch(job_id)

    ctx.touch = touch
    ctx.extras["thread_id"] = threading.get_ident()
    if ctx.header.deps and any(unique.pending(conn, k) for k in ctx.header.deps):
        action = Defer(ctx.task.options.depends_poll)
        with lock:
            execute(conn, app, job_id, ctx, action)
        core.notify(app, ctx, action)
        return action
    core.before(app, ctx)
    try:
        try:
            result = ctx.task.fn(ctx.payload)
            if asyncio.iscoroutine(result):
                result = asyncio.run(result)
            ctx.result = result
        finally:
            # A time limit that fired just as the handler returned raises in here at the
            # latest (the middleware stops watching inside this call), so it is caught below.
            core.handler_exit(app, ctx)
    except Exception as exc:
        core.fail(ctx, exc)
    with lock:
        if core.needs_attempt(app, ctx):
            info = conn.stats_job(job_id)
            ctx.attempt = int(str(info["releases"])) + 1 if info else 1
        action = core.finish(app, ctx)
        execute(conn, app, job_id, ctx, action)
    core.notify(app, ctx, action)
    return action


class ThreadWorker(WorkerBase):
    """``concurrency`` threads, each with its own connection.

    >>> from stalkd.worker.app import App
    >>> app = App(middleware=[])
    >>> _ = app.task(lambda p: None, name="noop")
    >>> ThreadWorker(app, concurrency=2).tubes
    ['noop']
    """

    def __init__(self, app: App, **kw: object) -> None:
        super().__init__(app, **kw)  # type: ignore[arg-type]
        self._conns: list[Conn] = []
        self._conns_lock = threading.Lock()

    def _slot(self) -> None:
        from stalkd.worker.conn import Conn

        conn: Conn | None = None
        lock = threading.Lock()
        while not self.stopping.is_set():
            try:
                if conn is None:
                    conn = Conn(self.app.address, timeout=self.app.client_timeout)
                    conn.watch_only(self.tubes)
                    with self._conns_lock:
                        self._conns.append(conn)
                got = conn.reserve(timeout=self.reserve_timeout)
                if got is None:
                    continue
                process_job(self.app, conn, lock, got[0], got[1])
                self._counted()
            except Exception as exc:
                if self.stopping.is_set() and isinstance(exc, OSError):
                    break
                if isinstance(exc, OSError):
                    log.warning("worker slot: connection to %s lost (%s); reconnecting",
                                self.app.address, exc)
                else:
                    # A bug or an unexpected server answer: never let it kill the slot. Closing
                    # the connection hands any job we hold back to the server.
                    log.exception("worker slot: unexpected error; reconnecting")
                if conn is not None:
                    self._forget(conn, abort=True)
                conn = None
                self.stopping.wait(0.5)  # back off before reconnecting (also wakes on stop)
        if conn is not None:
            self._forget(conn)

    def _forget(self, conn: Conn, *, abort: bool = False) -> None:
        with self._conns_lock:
            if conn in self._conns:
                self._conns.remove(conn)
        with contextlib.suppress(OSError):
            conn.abort() if abort else conn.close()

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
            log.info("draining: no new reservations; in-flight jobs get %.0fs (signal again to "
                     "release them now)", self.grace)
            deadline = time.monotonic() + self.grace
            for t in threads:
                while t.is_alive() and not self.stop_now.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    t.join(timeout=min(left, 0.1))
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
