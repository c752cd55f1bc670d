"""Heartbeat: a job still running is touched before its TTR ends, so a live worker keeps it and
a dead worker (no heartbeat) loses it to the server after one TTR.

One daemon thread serves every in-flight job of a worker process: it sleeps until the soonest
touch is due. Touches go through ``ctx.touch``, which the runner makes safe to call from this
thread (the job's connection is idle while its handler runs).

Ensures: while a job is registered, the gap between its reserve/touches is at most
``interval(ttr) < ttr - 1`` (plus scheduling lateness), i.e. before beanstalkd's DEADLINE_SOON
margin; a job is never touched after ``on_handler_exit`` unregistered it (barring one touch
already under way, which then races the ack and gets NOT_FOUND, logged).
"""

from __future__ import annotations

import logging
import threading
import time

from stalkd.worker.context import JobContext
from stalkd.worker.middleware.base import Middleware

__all__ = ["Heartbeat", "interval"]

log = logging.getLogger("stalkd.worker")


def interval(ttr: float) -> float:
    """Seconds between touches for a job with this TTR: half the TTR, and at least 1.5 s
    before it ends, but no more often than every 0.25 s.

    >>> interval(120), interval(3), interval(2)
    (60.0, 1.5, 0.5)
    """
    return max(0.25, min(ttr / 2, ttr - 1.5))


class Heartbeat(Middleware):
    """Touches in-flight jobs (see module docstring)."""

    def __init__(self) -> None:
        self._due: dict[JobContext, float] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._wake_at = 0.0   # when the thread plans to wake next (monotonic)
        self.touches = 0

    def before_process(self, ctx: JobContext) -> None:
        due = time.monotonic() + interval(ctx.ttr)
        with self._cond:
            self._due[ctx] = due
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="stalkd-heartbeat",
                                                daemon=True)
                self._thread.start()
            elif due < self._wake_at:
                # Wake the thread only when this job is due before its planned wake-up: with
                # equal TTRs that is never, which keeps short jobs free of thread switches.
                self._cond.notify()

    def on_handler_exit(self, ctx: JobContext) -> None:
        with self._cond:
            self._due.pop(ctx, None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [c for c, t in self._due.items() if t <= now]
                if not due:
                    self._wake_at = min(self._due.values(), default=now + 60)
                    self._cond.wait(timeout=self._wake_at - now)
                    continue
                for c in due:
                    self._due[c] = now + interval(c.ttr)
            for c in due:
                try:
                    c.touch()
                    self.touches += 1
                except Exception as exc:  # NOT_FOUND after a race with the ack, or a lost conn
                    log.warning("heartbeat: touch of job %d failed: %s", c.job_id, exc)
