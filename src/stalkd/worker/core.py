"""Processing one delivery, without I/O: decode, run middleware hooks, decide the action.

The sync runner, the asyncio runner and the in-process testing broker all drive these steps, so
the three cannot drift apart. Each runner supplies the I/O: reserve, stats-job (for the attempt
number), and carrying out the action.

Ensures: every delivery ends in exactly one action; a handler that returned leads to Delete
unless a middleware decided otherwise; a handler that raised never leads to Delete (with no
retries middleware installed, it is dead-lettered).
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import TYPE_CHECKING, Any

from stalkd.worker.context import Action, Bury, DeadLetter, Defer, Delete, JobContext, Release
from stalkd.worker.serializer import decode_envelope

if TYPE_CHECKING:
    from stalkd.worker.app import App

log = logging.getLogger("stalkd.worker")

__all__ = ["begin", "undecodable", "before", "handler_exit", "fail", "finish", "notify",
           "needs_attempt"]


def begin(app: App, job_id: int, body: bytes, *, tube: str | None = None) -> JobContext:
    """Decode a reserved job into a context; raises EnvelopeError / UnknownTask / the
    serializer's error for a body no task can run (the caller dead-letters it)."""
    header, raw = decode_envelope(body, job_id=job_id)
    task = app.task_for(header.task if header else None, tube, job_id)
    if header is None:
        from stalkd.worker.serializer import Header

        header = Header(task=task.name)
    payload = app.serializer.loads(raw)
    return JobContext(job_id=job_id, body=body, task=task, header=header, payload=payload,
                      started=time.monotonic(), time_limit=task.options.time_limit)


def undecodable(job_id: int, body: bytes, exc: BaseException, *, now: float) -> Bury:
    """Dead-letter action for a job whose body could not even be decoded."""
    record = DeadLetter(job_id=job_id, tube="?", task="?", attempts=1,
                        error=f"{type(exc).__name__}: {exc}",
                        traceback="".join(traceback.format_exception(exc)),
                        failed_at=now, body=body)
    return Bury(priority=0, record=record)


def before(app: App, ctx: JobContext) -> None:
    for m in app.middleware:
        _safe(m.before_process, ctx)


def handler_exit(app: App, ctx: JobContext) -> None:
    """Call right after the handler returned or raised (in a ``finally``)."""
    for m in app.middleware:
        _safe(m.on_handler_exit, ctx)


def fail(ctx: JobContext, exc: BaseException) -> None:
    """Record a handler's exception on the context (with its formatted traceback)."""
    ctx.exception = exc
    ctx.traceback = "".join(traceback.format_exception(exc))


def needs_attempt(app: App, ctx: JobContext) -> bool:
    """Whether the runner must fetch the attempt number (stats-job) before ``finish``."""
    if ctx.attempt is not None:
        return False
    return ctx.exception is not None or any(m.needs_attempt for m in app.middleware)


def finish(app: App, ctx: JobContext) -> Action:
    """Run the after-hooks (in reverse order) and return the action for this delivery."""
    ctx.duration = time.monotonic() - ctx.started
    for m in reversed(app.middleware):
        _safe(m.after_process, ctx)
    if ctx.action is None:
        if ctx.exception is None:
            ctx.action = Delete()
        else:
            # No middleware decided (e.g. retries removed): never drop a failed job silently.
            ctx.action = Bury(priority=ctx.task.priority, record=DeadLetter(
                job_id=ctx.job_id, tube=ctx.tube, task=ctx.task.name, attempts=ctx.attempt or 1,
                error=f"{type(ctx.exception).__name__}: {ctx.exception}",
                traceback=ctx.traceback or "", failed_at=time.time(), body=ctx.body))
    return ctx.action


def notify(app: App, ctx: JobContext, action: Action) -> None:
    """Tell middleware what was done (after the server acknowledged it)."""
    for m in app.middleware:
        if isinstance(action, Release):
            _safe(m.on_retry, ctx, action)
        elif isinstance(action, Bury):
            _safe(m.on_dead_letter, ctx, action)
        elif isinstance(action, Defer):
            _safe(m.on_deferred, ctx, action.delay)


def _safe(hook: Any, *args: Any) -> None:
    try:
        hook(*args)
    except Exception:
        # A broken metrics or logging hook must not decide a job's fate.
        log.exception("middleware hook %s failed", getattr(hook, "__qualname__", hook))
