"""Structured log lines: one per failure, and a periodic INFO summary of throughput.

    ↻ job=43 tube=emails task=send attempt=2 ms=0.4 retry_in=4s error="TimeoutError: smtp"
    ✗ job=44 tube=emails task=send attempt=5 ms=0.4 dead error="ValueError: bad address"
    ⊘ job=45 tube=emails task=send ms=812.0 cancelled
    ⌁ 1523 done, 2 retried, 1 dead, 1 cancelled in 10.0s (152.9 jobs/s)

A line per completed job (``✓ job=42 tube=emails task=send ms=3.1``) is logged at DEBUG, or at
INFO with ``per_job=True``; it is written once the server acknowledged the delete, so a job is
never logged done when its acknowledgement was lost. ``extra`` fields hold the same values for
JSON formatters. A job stopped on request (``stalkd cancel``) is deleted like a done one, but
logged ``⊘`` at INFO and counted as cancelled, not done. The attempt is known for failures; successes show it with
``with_attempt=True`` (one ``stats-job`` per job).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from stalkd.worker.actions import GiveUp, RetryLater
from stalkd.worker.cancel import JobCancelled
from stalkd.worker.context import JobContext
from stalkd.worker.middleware.base import Middleware, RunningWorker

__all__ = ["StructuredLogging"]


class StructuredLogging(Middleware):
    """Logs failures, completions (see module docstring) and a summary every ``summary_every``
    seconds while jobs flow, to ``logger`` (default ``stalkd.worker``)."""

    def __init__(self, logger: logging.Logger | None = None, *, with_attempt: bool = False,
                 per_job: bool = False, summary_every: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger or logging.getLogger("stalkd.worker")
        self.needs_attempt = with_attempt
        self.done_level = logging.INFO if per_job else logging.DEBUG
        self.summary_every = summary_every
        self._clock = clock
        self._lock = threading.Lock()
        self._since = clock()
        self._counts = [0, 0, 0, 0]  # done, retried, dead, cancelled since the last summary

    def _emit(self, level: int, glyph: str, ctx: JobContext, tail: str = "") -> None:
        ms = (ctx.duration or 0.0) * 1000
        attempt = "" if ctx.attempt is None else f" attempt={ctx.attempt}"
        fields = {"job_id": ctx.job_id, "tube": ctx.tube, "task": ctx.task.name,
                  "attempt": ctx.attempt, "duration_ms": round(ms, 3)}
        self.logger.log(level, "%s job=%d tube=%s task=%s%s ms=%.1f%s", glyph, ctx.job_id,
                        ctx.tube, ctx.task.name, attempt, ms, tail, extra=fields)

    def _count(self, which: int) -> None:
        now = self._clock()
        with self._lock:
            self._counts[which] += 1
            if now - self._since < self.summary_every:
                return
            counts, since = self._counts, self._since
            self._counts, self._since = [0, 0, 0, 0], now
        self._summary(counts, now - since)

    def _summary(self, counts: list[int], seconds: float) -> None:
        done, retried, dead, cancelled = counts
        rate = sum(counts) / seconds if seconds > 0 else 0.0
        self.logger.info("⌁ %d done, %d retried, %d dead, %d cancelled in %.1fs (%.1f jobs/s)",
                         done, retried, dead, cancelled, seconds, rate,
                         extra={"done": done, "retried": retried, "dead": dead,
                                "cancelled": cancelled, "jobs_per_s": round(rate, 1)})

    def on_done(self, ctx: JobContext) -> None:
        if isinstance(ctx.exception, JobCancelled):  # deleted as asked, not done
            self._emit(logging.INFO, "⊘", ctx, " cancelled")
            self._count(3)
            return
        if self.logger.isEnabledFor(self.done_level):
            self._emit(self.done_level, "✓", ctx)
        self._count(0)

    def on_retry(self, ctx: JobContext, action: RetryLater) -> None:
        self._emit(logging.WARNING, "↻", ctx,
                   f' retry_in={action.delay}s error="{_short(ctx.exception)}"')
        self._count(1)

    def on_dead_letter(self, ctx: JobContext, action: GiveUp) -> None:
        self._emit(logging.ERROR, "✗", ctx, f' dead error="{_short(ctx.exception)}"')
        self._count(2)

    def on_deferred(self, ctx: JobContext, delay: int) -> None:
        why = f"waiting_for={','.join(ctx.header.deps)}" if ctx.header.deps else "postponed"
        self._emit(logging.INFO, "⏸", ctx, f" {why} recheck_in={delay}s")

    def on_worker_stop(self, worker: RunningWorker) -> None:
        with self._lock:
            counts, since = self._counts, self._since
            self._counts, self._since = [0, 0, 0, 0], self._clock()
        if any(counts):
            self._summary(counts, self._clock() - since)


def _short(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    return f"{type(exc).__name__}: {exc}".replace('"', "'")[:200]
