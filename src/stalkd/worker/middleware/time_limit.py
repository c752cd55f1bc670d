"""Time limit: a job running longer than its task's ``time_limit`` fails with
TimeLimitExceeded (a retryable failure, so retries and dead letters apply), in every mode.

The monitor thread calls ``ctx.interrupt()``, which the delivery pipeline provides for the way
the handler runs: an async handler has its task cancelled; a sync handler with a time limit runs
on a handler thread of its own, which the slot stops waiting for at the limit (the attempt fails
at once, even while the handler is blocked in a C call such as ``time.sleep`` or a socket
``recv``) and which gets the exception raised asynchronously, so it stops at its next bytecode
(``syncrun._SyncRun`` says why not signals). The failure's message names the job, the task and
the limit.
"""

from __future__ import annotations

import threading
import time

from stalkd.worker.context import JobContext
from stalkd.worker.middleware.base import Middleware

__all__ = ["TimeLimit"]


class TimeLimit(Middleware):
    """Enforces ``ctx.time_limit`` (from ``@app.task(time_limit=...)`` or ``default``)."""

    def __init__(self, default: float | None = None) -> None:
        self.default = default
        self._running: dict[JobContext, float] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def before_process(self, ctx: JobContext) -> None:
        if ctx.time_limit is None:
            ctx.time_limit = self.default
        if ctx.time_limit is None:
            return
        with self._cond:
            self._running[ctx] = time.monotonic() + ctx.time_limit
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
                late = [c for c, end in self._running.items() if end <= now]
                for c in late:
                    del self._running[c]
                    # Under the lock, so on_handler_exit has not finished for c: the exception
                    # lands in the handler or inside the pipeline's handler_exit, which catches it.
                    c.interrupted = True
                    c.interrupt()
                if not late:
                    ends = list(self._running.values())
                    self._cond.wait(timeout=min(ends, default=now + 60) - now)
