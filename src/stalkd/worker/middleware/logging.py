"""Structured log lines, one per delivery outcome, greppable and carrying the job id, tube,
task, attempt and duration (``extra`` fields hold the same values for JSON formatters).

    ✓ job=42 tube=emails task=send attempt=1 ms=3.1
    ↻ job=43 tube=emails task=send attempt=2 ms=0.4 retry_in=4s error="TimeoutError: smtp"
    ✗ job=44 tube=emails task=send attempt=5 ms=0.4 dead error="ValueError: bad address"

The attempt is known for failures; for successes it is shown when ``with_attempt=True`` (which
costs one ``stats-job`` per job) and as ``?`` otherwise.
"""

from __future__ import annotations

import logging

from stalkd.worker.context import Bury, JobContext, Release
from stalkd.worker.middleware.base import Middleware

__all__ = ["StructuredLogging"]


class StructuredLogging(Middleware):
    """Logs each outcome to ``logger`` (default ``stalkd.worker``)."""

    def __init__(self, logger: logging.Logger | None = None, *, with_attempt: bool = False) -> None:
        self.logger = logger or logging.getLogger("stalkd.worker")
        self.needs_attempt = with_attempt

    def _emit(self, level: int, glyph: str, ctx: JobContext, tail: str = "") -> None:
        ms = (ctx.duration or 0.0) * 1000
        attempt = "?" if ctx.attempt is None else str(ctx.attempt)
        fields = {"job_id": ctx.job_id, "tube": ctx.tube, "task": ctx.task.name,
                  "attempt": ctx.attempt, "duration_ms": round(ms, 3)}
        self.logger.log(level, "%s job=%d tube=%s task=%s attempt=%s ms=%.1f%s", glyph,
                        ctx.job_id, ctx.tube, ctx.task.name, attempt, ms, tail, extra=fields)

    def after_process(self, ctx: JobContext) -> None:
        if ctx.exception is None:
            self._emit(logging.INFO, "✓", ctx)

    def on_retry(self, ctx: JobContext, action: Release) -> None:
        self._emit(logging.WARNING, "↻", ctx,
                   f' retry_in={action.delay}s error="{_short(ctx.exception)}"')

    def on_dead_letter(self, ctx: JobContext, action: Bury) -> None:
        self._emit(logging.ERROR, "✗", ctx, f' dead error="{_short(ctx.exception)}"')

    def on_deferred(self, ctx: JobContext, delay: int) -> None:
        self._emit(logging.INFO, "⏸", ctx, f" waiting_for={','.join(ctx.header.deps)} "
                   f"recheck_in={delay}s")


def _short(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    return f"{type(exc).__name__}: {exc}".replace('"', "'")[:200]
