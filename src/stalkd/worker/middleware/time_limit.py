"""Time limit: a job running longer than its task's ``time_limit`` fails with
TimeLimitExceeded (a retryable failure, so retries and dead letters apply).

Sync handlers (in worker threads, or in the handler threads of the asyncio runner) are
interrupted by raising the exception asynchronously in their thread
(``PyThreadState_SetAsyncExc``): it lands at the next Python bytecode, so a handler blocked
inside a C call is interrupted only when that call returns. Async handlers are cancelled by the
asyncio runner with ``asyncio.wait_for`` using ``ctx.time_limit``.

Not enforced: handlers in the in-process testing broker.
"""

from __future__ import annotations

import ctypes
import threading
import time

from stalkd.worker.context import JobContext
from stalkd.worker.errors import TimeLimitExceeded
from stalkd.worker.middleware.base import Middleware

__all__ = ["TimeLimit"]


class TimeLimit(Middleware):
    """Enforces ``ctx.time_limit`` (from ``@app.task(time_limit=...)`` or ``default``)."""

    def __init__(self, default: float | None = None) -> None:
        self.default = default
        self._running: dict[JobContext, tuple[int, float]] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def before_process(self, ctx: JobContext) -> None:
        if ctx.time_limit is None:
            ctx.time_limit = self.default
        thread_id = ctx.extras.get("thread_id")
        if ctx.time_limit is None or ctx.task.is_async or thread_id is None:
            return
        with self._cond:
            self._running[ctx] = (thread_id, time.monotonic() + ctx.time_limit)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="stalkd-time-limit",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def on_handler_exit(self, ctx: JobContext) -> None:
        # Under the lock the monitor fires under: after this returns it can no longer fire for
        # ctx, and if it fired before, the exception lands in this thread before we return.
        with self._cond:
            self._running.pop(ctx, None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                late = [(c, tid) for c, (tid, end) in self._running.items() if end <= now]
                for c, tid in late:
                    del self._running[c]
                    # Under the lock, so on_handler_exit has not finished for c: the exception
                    # lands in the handler or inside the runner's handler_exit, which catches it.
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(tid), ctypes.py_object(TimeLimitExceeded))
                if not late:
                    ends = [end for _, end in self._running.values()]
                    self._cond.wait(timeout=min(ends, default=now + 60) - now)
