"""stalkd.worker: tasks, retries with backoff, dead letters, heartbeats and graceful shutdown,
on the beanstalkd protocol (works against stalkd and against beanstalkd itself).

>>> from stalkd.worker import App
>>> app = App("127.0.0.1:11300")
>>> @app.task(tube="thumbs", max_attempts=4, ttr=60)
... def thumbnail(payload: dict) -> None:
...     ...

Producers call ``thumbnail.put({...})``; ``stalkd worker mymodule:app --concurrency 8`` runs it
(``--mode threads|processes|asyncio``; ``async def`` tasks are awaited).

How it behaves (each point is kept in one module; see its docstring):

* Jobs: the body is ``#stalkd1 {"t": task, ...}\n`` + the payload (JSON by default, or any
  ``Serializer``); a ``validate`` hook rejects payloads at ``put``. Bodies without the prefix,
  from other producers, go to the tube's only task (``serializer``).
* Failure: released with jittered exponential backoff (``backoff.compute_backoff``), the attempt
  number being the server's ``releases`` + ``buries`` counters + 1 (``stats-job``, read only on
  failure; a dead letter kicked back by ``stalkd retry`` is one attempt more).
  ``NonRetryable`` (or ``retryable = False``) skips the remaining attempts (``middleware.retries``).
* Dead letters: after the last attempt the job is buried in its tube and a JSON record (error,
  traceback, attempts, body) is put into the ``stalkd.failed`` tube: ``stalkd failed`` lists
  them, ``stalkd retry`` kicks them (``deadletter``).
* Heartbeat: running jobs are touched every ``min(ttr/2, ttr-1.5 s)``, so a live worker keeps a
  long job and a dead or frozen one loses it after one TTR (``middleware.heartbeat``).
* SIGTERM: no new reservations; in-flight jobs get ``--grace`` seconds, then are released by
  closing their connections (which leaves ``releases``, hence attempts, untouched); a second
  SIGTERM releases at once; exit 0 (``middleware.shutdown``, ``runner``, ``procs``, ``aio``).
* Unique keys and dependencies: ``put(..., key=K)`` is a no-op while a job holding ``K`` is
  pending; ``put(..., depends_on=[K])`` waits until that job completed; built from marker jobs
  in ``stalkd.key.*`` tubes (``unique``, with the server extension that would make it exact).
* Cancel: ``app.cancel(job_id)`` deletes a job that has not started; ``running=True`` also asks
  a running one to stop: a sync handler checks ``cancelled()``, an async one gets
  ``CancelledError`` (``cancel``, ``middleware.cancellation``).
* Transactional enqueue: ``stalkd.outbox``. Tests: ``app.testing()`` (``testing``).
* Delivery is at least once: a job runs again if its worker dies or its TTR runs out before the
  ack, so handlers should be idempotent (``force_retry()`` in testing mode checks that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stalkd.worker.actions import (
    Complete,
    DeadLetter,
    GiveUp,
    Recheck,
    RetryLater,
    WaitForDeps,
    WorkerAction,
)
from stalkd.worker.app import App, Task, TaskOptions
from stalkd.worker.backoff import Backoff, compute_backoff
from stalkd.worker.cancel import JobCancelled, cancelled, raise_if_cancelled
from stalkd.worker.context import JobContext
from stalkd.worker.errors import (
    EnvelopeError,
    NonRetryable,
    Postpone,
    Retry,
    TimeLimitExceeded,
    UnknownTask,
    ValidationError,
)
from stalkd.worker.middleware import Middleware
from stalkd.worker.serializer import JsonSerializer, Serializer
from stalkd.worker.task import CallTask

if TYPE_CHECKING:
    from stalkd.worker.runner import WorkerBase

__all__ = [
    "App", "Task", "CallTask", "TaskOptions", "Backoff", "compute_backoff", "DeadLetter", "JobContext",
    "WorkerAction", "Complete", "RetryLater", "GiveUp", "WaitForDeps", "Recheck",
    "NonRetryable", "Postpone", "Retry", "TimeLimitExceeded", "ValidationError", "EnvelopeError",
    "UnknownTask", "Middleware", "JsonSerializer", "Serializer", "make_worker",
    "JobCancelled", "cancelled", "raise_if_cancelled",
]


def make_worker(app: App, *, mode: str = "threads", concurrency: int = 1, **kw: Any) -> WorkerBase:
    """A worker for ``app`` in one of the modes ``threads``, ``processes``, ``asyncio``.

    >>> app = App(middleware=[]); _ = app.task(lambda p: None, name="t")
    >>> type(make_worker(app, mode="asyncio", concurrency=4)).__name__
    'AsyncWorker'
    """
    if mode == "threads":
        from stalkd.worker.runner import ThreadWorker

        return ThreadWorker(app, concurrency=concurrency, **kw)
    if mode == "processes":
        from stalkd.worker.procs import ProcessWorker

        return ProcessWorker(app, concurrency=concurrency, **kw)
    if mode == "asyncio":
        from stalkd.worker.aio import AsyncWorker

        return AsyncWorker(app, concurrency=concurrency, **kw)
    raise ValueError(f"unknown worker mode {mode!r} (threads, processes, asyncio)")
