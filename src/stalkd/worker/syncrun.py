"""Running a sync handler on a worker slot's thread, and stopping it at its time limit.

The drivers of the delivery pipeline (``runner``: threads and processes; ``aio``, on a thread
of its own) call :func:`run_sync` for a ``pipeline.RunHandler`` step: the middleware hooks
around the handler, the handler under ``stalkd.worker.cancelled()``'s context, its exception
recorded on the job's context.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from typing import Any

from stalkd.worker.cancel import current
from stalkd.worker.context import JobContext
from stalkd.worker.errors import TimeLimitExceeded
from stalkd.worker.pipeline import handler_ended, handler_failed, handler_started
from stalkd.worker.registry import Registry

__all__ = ["run_sync"]


def run_sync(app: Registry, ctx: JobContext) -> None:
    """Run a sync handler (or an async one on a private loop) on the calling thread, or, when
    the job has a time limit, on a thread of its own that the caller abandons at the limit."""
    run = _SyncRun(threading.get_ident())
    ctx.interrupt = run.interrupt
    handler_started(app, ctx)
    try:
        try:
            ctx.result = _call(ctx) if ctx.time_limit is None else run.in_thread(ctx)
        finally:
            handler_ended(app, ctx)
    except Exception as exc:
        handler_failed(ctx, exc)


def _call(ctx: JobContext) -> Any:
    token = current.set(ctx)  # what stalkd.worker.cancelled() reads
    try:
        result = ctx.task.fn(ctx.payload)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return result
    finally:
        current.reset(token)


class _SyncRun:
    """How ``ctx.interrupt`` stops a sync handler.

    An exception raised asynchronously in a thread (``PyThreadState_SetAsyncExc``) lands only
    at its next bytecode, so a handler blocked in a C call (``time.sleep``, a socket ``recv``,
    a lock) would overrun its limit by as long as that call lasts. So a job with a time limit
    runs on a handler thread while the calling thread waits: at the limit the caller stops
    waiting and fails the attempt at once, and the abandoned thread gets the exception too, so
    it stops at its next bytecode (a thread cannot be killed: until then its side effects go
    on, which at-least-once handlers must tolerate anyway). Signals are no alternative: only a
    process's main thread receives them, and slots are threads in every mode. A job without a
    limit keeps running on the calling thread (no thread start per job)."""

    def __init__(self, caller: int) -> None:
        self.caller = caller
        self.threaded = False
        self.handler: int | None = None  # the handler thread's id once started
        self.woken: threading.Event | None = None  # the handler ended, or the limit fired
        # (made by in_thread only: most jobs have no time limit, and an Event is a Condition)
        self.fired = False
        self.finished = False  # the handler thread is past the handler: never raise in it then
        self._lock = threading.Lock()     # (its id may be reused once it has exited)

    def interrupt(self) -> None:
        if not self.threaded:
            self.fired = True
            _raise_in(self.caller, TimeLimitExceeded)
            return
        with self._lock:
            self.fired = True
            if self.handler is not None and not self.finished:
                _raise_in(self.handler, TimeLimitExceeded)
        assert self.woken is not None
        self.woken.set()

    def in_thread(self, ctx: JobContext) -> Any:
        outcome: list[Any] = []
        woken = self.woken = threading.Event()

        def target() -> None:
            try:
                try:
                    outcome.append((True, _call(ctx)))
                finally:
                    with self._lock:
                        self.finished = True
            except BaseException as exc:  # handed to the waiting caller
                outcome.append((False, exc))
            woken.set()

        t = threading.Thread(target=target, name=f"stalkd-handler-{ctx.job_id}", daemon=True)
        self.threaded = True
        t.start()
        with self._lock:
            self.handler = t.ident
            if self.fired and not self.finished:  # fired before the id was known
                _raise_in(self.handler or 0, TimeLimitExceeded)
        woken.wait()
        if not outcome:  # the limit fired first: abandon the thread
            raise TimeLimitExceeded()
        ok, value = outcome[0]
        if not ok:
            raise value
        return value


def _raise_in(thread_id: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))
