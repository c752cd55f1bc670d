"""The middleware interface: named hooks around each job and around the worker's life.

Hooks are called in registration order before processing and in reverse order after it
(the Dramatiq convention), so an outer middleware sees everything an inner one did.

>>> class Count(Middleware):
...     def __init__(self) -> None:
...         self.done = 0
...     def after_process(self, ctx: JobContext) -> None:
...         self.done += ctx.exception is None
"""

from __future__ import annotations

from typing import Protocol

from stalkd.worker.actions import GiveUp, RetryLater
from stalkd.worker.context import JobContext

__all__ = ["Middleware", "RunningWorker"]


class RunningWorker(Protocol):
    """What a middleware may ask of the worker running it (every mode offers this)."""

    def stop(self, now: bool = False) -> None:
        """Drain (``now=True``: release in-flight jobs at once)."""


class Middleware:
    """Base class; override the hooks you need. Hooks must not raise (errors are logged)."""

    #: set True when ``after_process`` needs ``ctx.attempt`` on success too (costs a stats-job)
    needs_attempt: bool = False

    def on_worker_start(self, worker: RunningWorker) -> None:
        """The worker is about to start reserving (called in the worker's main thread)."""

    def on_worker_stop(self, worker: RunningWorker) -> None:
        """The worker has stopped (all slots joined or abandoned)."""

    def before_fork(self, worker: RunningWorker) -> None:
        """``--mode processes``: the parent is about to fork its first children."""

    def after_fork(self) -> None:
        """``--mode processes``: this is a newly forked child, before its worker starts (its
        own ``on_worker_start`` follows). Make anew here any lock (or object holding one)
        another thread of the parent may use: one held there at the fork stays held in the
        child for ever; and only the forking thread carries on in the child."""

    def before_process(self, ctx: JobContext) -> None:
        """A job was reserved and decoded; its handler runs next."""

    def on_handler_exit(self, ctx: JobContext) -> None:
        """The handler has just returned or raised, on its own thread, before the acks and
        ``after_process``; keep it quick (the time limit and heartbeat stop here)."""

    def after_process(self, ctx: JobContext) -> None:
        """The handler returned (``ctx.result``) or raised (``ctx.exception``); set
        ``ctx.action`` to decide what happens to the job (the retries middleware does)."""

    def on_done(self, ctx: JobContext) -> None:
        """The server acknowledged the job's delete: it is done."""

    def on_retry(self, ctx: JobContext, action: RetryLater) -> None:
        """The job was released for another attempt."""

    def on_dead_letter(self, ctx: JobContext, action: GiveUp) -> None:
        """The job was buried and its dead-letter record written."""

    def on_deferred(self, ctx: JobContext, delay: int) -> None:
        """A dependency was pending; the job was re-put ``delay`` seconds later."""
