"""Retries: a failed job is released with jittered exponential backoff, and dead-lettered
(buried, with error and traceback recorded) after its task's last attempt or at once when the
exception is non-retryable.

Ensures: a job is never buried while attempts remain for a retryable error, and never released
once ``attempt >= max_attempts``. The attempt number is the job's ``releases`` counter + 1, read
with ``stats-job`` (beanstalkd keeps it across restarts with a binlog, so it survives worker
crashes). A worker killed mid-job is not counted: the server's TTR timeout releases the job
without touching ``releases``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from stalkd.worker.actions import GiveUp, RetryLater, dead_letter
from stalkd.worker.context import JobContext
from stalkd.worker.errors import Retry, is_retryable
from stalkd.worker.middleware.base import Middleware

__all__ = ["Retries", "decide"]


def decide(ctx: JobContext, *, now: float, rand: float) -> RetryLater | GiveUp | None:
    """The action for a finished delivery: None on success (the default, complete), a
    RetryLater while attempts remain, a GiveUp otherwise. Pure: ``now`` and ``rand`` are arguments."""
    exc = ctx.exception
    if exc is None:
        return None
    task = ctx.task
    attempt = ctx.attempt if ctx.attempt is not None else 1
    if is_retryable(exc) and attempt < task.max_attempts:
        if isinstance(exc, Retry) and exc.delay is not None:
            delay = exc.delay
        else:
            delay = task.backoff.delay(attempt, rand=rand)
        return RetryLater(delay=delay, priority=task.priority)
    record = dead_letter(ctx.job_id, ctx.body, exc, tube=task.tube, task=task.name,
                         attempts=attempt, traceback=ctx.traceback or "", now=now)
    return GiveUp(priority=task.priority, record=record)


class Retries(Middleware):
    """Sets ``ctx.action`` for failed jobs (see :func:`decide`). ``clock`` and ``rng`` are
    injectable for tests.

    >>> Retries().needs_attempt
    False
    """

    def __init__(self, *, clock: Callable[[], float] = time.time,
                 rng: Callable[[], float] = random.random) -> None:
        self._clock = clock
        self._rng = rng

    def after_process(self, ctx: JobContext) -> None:
        if ctx.exception is not None and ctx.action is None:
            ctx.action = decide(ctx, now=self._clock(), rand=self._rng())
