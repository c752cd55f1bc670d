"""One delivery, decided without I/O: decode, dependencies, run, attempt number, action plan.

:func:`deliver` is a generator: it yields the steps a delivery needs (a :class:`Call` on the
job's connection, or :class:`RunHandler`) and is sent each step's result. Thin drivers carry the
steps out: ``runner`` (threads, and each process of ``--mode processes``), ``aio`` (asyncio) and
``testing`` (``app.testing()``, over an in-memory server). So middleware see the same hooks in
the same order in every mode:

    before_process → handler → on_handler_exit → after_process (reverse order) → the server
    calls of the action → on_done / on_retry / on_dead_letter / on_deferred

Ensures: every delivery ends in exactly one ``WorkerAction``; a handler that returned leads to
``Complete`` unless a middleware decided otherwise; a handler that raised never does (with no
retries middleware installed it is given up). Writes are ordered so a crash between two of them
duplicates and never loses: the dead-letter record before the bury, the re-put before the delete,
a task's stored outcome (``result_ttl``) before the delete or bury that ends it.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Generator, Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from stalkd.worker import copies, unique
from stalkd.worker.actions import (
    Complete,
    GiveUp,
    Recheck,
    RetryLater,
    WaitForDeps,
    WorkerAction,
    dead_letter,
)
from stalkd.worker.cancel import JobCancelled
from stalkd.worker.context import JobContext
from stalkd.worker.errors import Postpone, TimeLimitExceeded
from stalkd.worker.middleware.base import Middleware
from stalkd.worker.registry import Registry
from stalkd.worker.results import InputMissing, decode_outcome, encode_outcome, gathered, waiting
from stalkd.worker.serializer import Header, decode_envelope, encode_envelope

log = logging.getLogger("stalkd.worker")

__all__ = ["Call", "RunHandler", "Step", "Delivered", "deliver", "handler_started",
           "handler_ended", "handler_failed", "call_failed", "LastAck", "RECORD_PRIORITY",
           "RECORD_TTR"]

RECORD_PRIORITY = 2**31   # dead-letter records in the failed tube
RECORD_TTR = 120


class Call(NamedTuple):
    """A server operation on the job's connection: ``ops.<op>(*args)`` (see ``ops.ServerOps``).
    ``last``: the delivery makes no server call after this one (a ``finish``), so a driver may
    send its next reserve in the same write (``ops.finish(..., reserve=True)``, whose reply
    carries the next job beside the acknowledgement)."""

    op: str
    args: tuple[Any, ...]
    last: bool = False


class RunHandler(NamedTuple):
    """Run the job's handler (the driver knows how: thread, event loop) and send back None."""

    ctx: JobContext


Step = Call | RunHandler


class Delivered(NamedTuple):
    """How a delivery ended: the action, whether the server acknowledged it, and the context
    (``None`` for a body that could not be decoded). A NamedTuple: one is made per job."""

    job_id: int
    action: WorkerAction
    acked: bool
    ctx: JobContext | None
    exception: BaseException | None


def deliver(app: Registry, job_id: int, body: bytes,
            tube: str | None = None) -> Generator[Step, Any, Delivered]:
    """The steps of one delivery of reserved job ``job_id`` (see the module docstring)."""
    ctx, exc = _try_begin(app, job_id, body, tube)
    if ctx is None and tube is None:
        # a driver reserving from several tubes does not know the job's; the server does (and
        # a bare body may be its tube's only task's)
        info = yield Call("stats_job", (job_id,))
        if info is not None:
            tube = str(info["tube"])
            ctx, exc = _try_begin(app, job_id, body, tube)
    if ctx is None:
        assert exc is not None
        action: WorkerAction = GiveUp(priority=0, record=dead_letter(
            job_id, body, exc, tube=tube or "?", now=time.time()))
        log.error("✗ job=%d tube=%s undecodable, buried: %s", job_id, tube or "?", exc)
        acked = yield from _act(app, job_id, None, action)
        return Delivered(job_id, action, acked, None, exc)
    if ctx.header.origin is not None or ctx.header.inputs:
        # A job of a group or chain, or a copy re-put while it waited: a crash between a copy's
        # put and the delete of what it copies leaves two, which may be reserved at once; only
        # the one the stored record names may run (see ``copies``).
        origin = ctx.header.origin or job_id
        # the job copied first, the record second: a record read after that job was seen gone
        # includes what its delete wrote (the reverse order could read an older record)
        there = None if ctx.header.prev is None else (
            (yield Call("stats_job", (ctx.header.prev,))) is not None)
        (prior,) = yield Call("fetch_results", (app.results, (origin,)))
        record = None if prior is None else decode_outcome(app.serializer, prior)
        verdict = copies.verdict(job_id, ctx.header.prev, record, prev_exists=there)
        if verdict != "run":
            return (yield from _not_run(app, job_id, ctx, origin, verdict))
    for key in ctx.header.deps:
        if unique.is_pending((yield Call("stats_tube", (unique.key_tube(key),)))):
            action = WaitForDeps(ctx.task.options.depends_poll, key)
            acked = yield from _act(app, job_id, ctx, action)
            _notify(app, ctx, action, acked)
            return Delivered(job_id, action, acked, ctx, None)
    if ctx.header.inputs:
        raw = yield Call("fetch_results", (app.results, ctx.header.inputs))
        try:
            ctx.payload = gathered(app.serializer, ctx.header, raw)
        except InputMissing as exc:
            handler_failed(ctx, exc)
    if ctx.exception is None:
        yield RunHandler(ctx)
    if ctx.attempt is None and (ctx.exception is not None
                                or any(m.needs_attempt for m in app.middleware)):
        ctx.attempt = attempt_of((yield Call("stats_job", (job_id,)))) + ctx.header.tries
    action = _finish(app, ctx)
    acked = yield from _act(app, job_id, ctx, action)
    _notify(app, ctx, action, acked)
    return Delivered(job_id, action, acked, ctx, ctx.exception)


def _not_run(app: Registry, job_id: int, ctx: JobContext, origin: int,
             verdict: copies.Verdict) -> Generator[Step, Any, Delivered]:
    """A copy that must not run its handler: it goes away, or is looked at again later."""
    action: WorkerAction
    if verdict == "recheck":
        log.info("job %d: job %d, which it copies, is still there: looking again later", job_id,
                 ctx.header.prev)
        action = Recheck(1)  # that job is about to be deleted, or back after a crash
    else:
        log.info("job %d: a copy of job %d that is %s: deleted", job_id, origin,
                 "done already" if verdict == "finished" else "not the one to run")
        ctx.extras["copy_of_finished" if verdict == "finished" else "stale_copy"] = True
        action = Complete()
    acked = yield from _act(app, job_id, ctx, action)
    if isinstance(action, Recheck):
        _notify(app, ctx, action, acked)
    return Delivered(job_id, action, acked, ctx, None)


def attempt_of(info: Mapping[str, Any] | None) -> int:
    """Which attempt a delivery is, from its job's ``stats-job``: 1, plus one per release (a
    retry) and per bury (a dead letter that ``stalkd retry`` kicked back gets one more attempt,
    and says so: kicking leaves ``releases`` as it was).

    >>> attempt_of({"releases": 2, "buries": 1}), attempt_of(None)
    (4, 1)
    """
    if not info:
        return 1
    return int(str(info.get("releases", 0))) + int(str(info.get("buries", 0))) + 1


_ACKS = frozenset({"delete", "release", "bury"})


def call_failed(step: Call, exc: BaseException) -> None:
    """A driver's call raised (the connection broke): say so when it was a job's
    acknowledgement, whose fate is then unknown to us (the server hands the job out again
    once it sees the connection close, unless the acknowledgement got there)."""
    op, args = (step.args[0], step.args[1:]) if step.op == "finish" else (step.op, step.args)
    if op in _ACKS:
        log.warning("job %s: acknowledgement (%s) lost with the connection: %s; the job may "
                    "run again", args[0], op, exc)


class LastAck:
    """The ``on_acked`` a driver gives a delivery's last call (which reserves the next job with
    it): the acknowledgement goes to the delivery as soon as it is in, so the hooks told of it
    run before the reserve returns. ``done`` holds what the delivery returned."""

    __slots__ = ("steps", "step", "done")

    def __init__(self, steps: Generator[Step, Any, Delivered], step: Call) -> None:
        self.steps = steps
        self.step = step
        self.done: list[Delivered] = []

    def __call__(self, ok: bool) -> None:
        try:
            self.steps.send((ok, None))
        except StopIteration as end:
            self.done.append(end.value)
            return
        raise RuntimeError(f"the delivery made a server call after its last one ({self.step.op})")

    def failed(self, exc: BaseException) -> None:
        """The last call raised: an acknowledgement not yet in is lost with the connection."""
        if not self.done:
            call_failed(self.step, exc)


def _try_begin(app: Registry, job_id: int, body: bytes,
               tube: str | None) -> tuple[JobContext | None, Exception | None]:
    try:
        return _begin(app, job_id, body, tube), None
    except Exception as exc:
        return None, exc


def _begin(app: Registry, job_id: int, body: bytes, tube: str | None) -> JobContext:
    """Decode a reserved job; raises EnvelopeError / UnknownTask / the serializer's error."""
    header, raw = decode_envelope(body, job_id=job_id)
    task = app.task_for(header.task if header else None, tube, job_id)
    payload = app.serializer.loads(raw)
    return JobContext(job_id=job_id, body=body, task=task, payload=payload,
                      header=header if header is not None else Header(task=task.name),
                      started=time.monotonic(), time_limit=task.options.time_limit)


def handler_started(app: Registry, ctx: JobContext) -> None:
    """Call just before the handler runs (on the thread or task that runs it)."""
    for m in app.middleware:
        _safe(m.before_process, ctx)


def handler_ended(app: Registry, ctx: JobContext) -> None:
    """Call right after the handler returned or raised, in a ``finally`` (a time limit firing
    just then raises in here at the latest, so it must be inside the caller's ``try``)."""
    for m in app.middleware:
        _safe(m.on_handler_exit, ctx)


def handler_failed(ctx: JobContext, exc: BaseException) -> None:
    """Record the handler's exception (with its formatted traceback) on the context."""
    if isinstance(exc, TimeLimitExceeded) and not exc.args:
        exc = TimeLimitExceeded(f"job {ctx.job_id}: task {ctx.task.name} ran past its time "
                                f"limit of {ctx.time_limit}s")
    ctx.exception = exc
    ctx.traceback = "".join(traceback.format_exception(exc))


def _finish(app: Registry, ctx: JobContext) -> WorkerAction:
    """Run the after-hooks (in reverse order) and return the action for this delivery."""
    ctx.duration = time.monotonic() - ctx.started
    if isinstance(ctx.exception, JobCancelled):
        ctx.action = Complete()  # stopped on request: deleted, as a queued job's cancel does
    elif isinstance(ctx.exception, Postpone):  # not a failure: put again later, as a wait is
        ctx.action = WaitForDeps(ctx.exception.delay)
        ctx.exception = ctx.traceback = None
    for m in reversed(app.middleware):
        _safe(m.after_process, ctx)
    if ctx.action is None:
        if ctx.exception is None:
            ctx.action = Complete()
        else:
            # No middleware decided (e.g. retries removed): never drop a failed job silently.
            ctx.action = GiveUp(priority=ctx.task.priority, record=dead_letter(
                ctx.job_id, ctx.body, ctx.exception, tube=ctx.tube, task=ctx.task.name,
                attempts=ctx.attempt or 1, traceback=ctx.traceback or "", now=time.time()))
    return ctx.action


def _act(app: Registry, job_id: int, ctx: JobContext | None,
         action: WorkerAction) -> Generator[Step, Any, bool]:
    """The server calls that carry out ``action``; False when the server no longer had the job
    reserved for us (its TTR ran out, so it may be running elsewhere: at-least-once)."""
    keep = None if ctx is None else _result_ttl(ctx)
    result = None
    if (ctx is not None and keep is not None and isinstance(action, (Complete, GiveUp))
            and not ctx.extras.get("copy_of_finished") and not ctx.extras.get("stale_copy")):
        result = (app.results, ctx.header.origin or job_id, _outcome(app, ctx, action), keep)
    # "finish" keeps the result and acknowledges in one round trip (see ops.ServerOps.finish)
    if isinstance(action, Complete):
        # a stale copy's key is held for the current copy, not by this one
        marker = None if ctx is None or ctx.extras.get("stale_copy") else ctx.header.marker
        if marker is not None:
            # The key is freed before the job's delete: a crash in between runs the job again
            # (at-least-once), where the other order held the key for ever and its dependents
            # waited for ever. The result goes first: whoever sees the key free reads it.
            if result is not None:
                yield Call("store_result", result)
                result = None
            yield Call("delete", (marker,))
            if ctx is not None and ctx.header.key is not None:
                yield from _calls(unique.wake_steps(ctx.header.key, marker))
        ok, _ = yield Call("finish", ("delete", job_id, 0, 0, result), last=True)
    elif isinstance(action, RetryLater):
        ok, _ = yield Call("finish", ("release", job_id, action.priority, action.delay, None),
                           last=True)
    elif isinstance(action, Recheck):
        assert ctx is not None
        ok, _ = yield Call("finish", ("release", job_id, ctx.task.priority, action.delay, None),
                           last=True)
    elif isinstance(action, GiveUp):
        yield Call("put", (app.failed_tube, action.record.to_json(), RECORD_PRIORITY, 0, RECORD_TTR))
        ok, _ = yield Call("finish", ("bury", job_id, action.priority, 0, result), last=True)
    else:
        assert ctx is not None
        origin = ctx.header.origin or job_id  # the copy's result is kept by the first id
        changed: dict[str, Any] = {} if keep is None else {"origin": origin, "prev": job_id}
        if ctx.attempt is not None and ctx.attempt > 1:  # postponed: attempts used go along
            changed["tries"] = ctx.attempt - 1
        body = ctx.body if not changed else encode_envelope(
            replace(ctx.header, **changed), decode_envelope(ctx.body, job_id=job_id)[1])
        copy = yield Call("put", (ctx.tube, body, ctx.task.priority, action.delay, ctx.ttr))
        waits = None if keep is None else (app.results, origin, waiting(app.serializer, copy), keep)
        # The waiter goes in before this job's delete, and a key freed meanwhile wakes the copy
        # here, also before the delete: a crash before the delete runs this job again, one
        # after it leaves nothing to do. A wake that beats the delete finds this job still
        # there: the copy looks again a second later (``copies``).
        if action.key is not None:
            freed = yield from _calls(unique.wait_steps(action.key, copy))
            if freed is not None:
                yield from _calls(unique.woken_steps(copy, freed))
        ok, _ = yield Call("finish", ("delete", job_id, 0, 0, waits), last=True)
    if not ok:
        log.warning("job %d: acknowledgement lost: no longer reserved by this worker when acting "
                    "on it (%s); its TTR ran out, so it may run again elsewhere", job_id,
                    type(action).__name__)
    return bool(ok)


def _calls(steps: Generator[unique.OpCall, Any, Any]) -> Generator[Step, Any, Any]:
    """``unique``'s server calls as this delivery's steps."""
    reply: Any = None
    while True:
        try:
            op, args = steps.send(reply)
        except StopIteration as end:
            return end.value
        reply = yield Call(op, args)


def _result_ttl(ctx: JobContext) -> float | None:
    """How long to keep this job's outcome: its envelope's say (groups, chains), else its task's."""
    return ctx.header.result_ttl if ctx.header.result_ttl is not None else ctx.task.options.result_ttl


def _outcome(app: Registry, ctx: JobContext, action: WorkerAction) -> bytes:
    """What to store for a finished job: its value, or the error it was given up after."""
    if isinstance(action, Complete):
        try:
            return encode_outcome(app.serializer, value=ctx.result)
        except (TypeError, ValueError) as exc:
            log.error("job %d: task %s returned a value the serializer cannot encode (%s); "
                      "stored as a failure", ctx.job_id, ctx.task.name, exc)
            return encode_outcome(app.serializer, error=exc)
    return encode_outcome(app.serializer, error=ctx.exception or RuntimeError("given up"),
                          traceback=ctx.traceback or "")


def _notify(app: Registry, ctx: JobContext, action: WorkerAction, acked: bool) -> None:
    """Tell middleware what was done, once the server acknowledged it."""
    if not acked:
        return
    if isinstance(action, Complete):
        for m in app.middleware:
            if type(m).on_done is not Middleware.on_done:  # most do not listen: skip the call
                _safe(m.on_done, ctx)
        return
    for m in app.middleware:
        if isinstance(action, RetryLater):
            _safe(m.on_retry, ctx, action)
        elif isinstance(action, GiveUp):
            _safe(m.on_dead_letter, ctx, action)
        else:
            _safe(m.on_deferred, ctx, action.delay)


def _safe(hook: Any, *args: Any) -> None:
    try:
        hook(*args)
    except Exception:
        # A broken metrics or logging hook must not decide a job's fate.
        log.exception("middleware hook %s failed", getattr(hook, "__qualname__", hook))
