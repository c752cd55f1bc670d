"""stalkd.worker: tasks, retries with backoff, dead letters, heartbeats and graceful shutdown,
on the beanstalkd protocol (works against stalkd and against beanstalkd itself).

>>> from stalkd.worker import App
>>> app = App("127.0.0.1:11300")
>>> @app.task(tube="thumbs", max_attempts=4, ttr=60)
... def thumbnail(payload: dict) -> None:
...     ...

Producers call ``thumbnail.put({...})``; ``stalkd worker mymodule:app --concurrency 8`` runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stalkd.worker.app import App, Task, TaskOptions
from stalkd.worker.backoff import Backoff, compute_backoff
from stalkd.worker.context import DeadLetter, JobContext
from stalkd.worker.errors import (
    EnvelopeError,
    NonRetryable,
    Retry,
    TimeLimitExceeded,
    UnknownTask,
    ValidationError,
)
from stalkd.worker.middleware import Middleware
from stalkd.worker.serializer import JsonSerializer, Serializer

if TYPE_CHECKING:
    from stalkd.worker.runner import WorkerBase

__all__ = [
    "App", "Task", "TaskOptions", "Backoff", "compute_backoff", "DeadLetter", "JobContext",
    "NonRetryable", "Retry", "TimeLimitExceeded", "ValidationError", "EnvelopeError",
    "UnknownTask", "Middleware", "JsonSerializer", "Serializer", "make_worker",
]


def make_worker(app: App, *, mode: str = "threads", concurrency: int = 1, **kw: object) -> WorkerBase:
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

        return ProcessWorker(app, concurrency=concurrency, **kw)  # type: ignore[arg-type]
    if mode == "asyncio":
        from stalkd.worker.aio import AsyncWorker

        return AsyncWorker(app, concurrency=concurrency, **kw)  # type: ignore[arg-type]
    raise ValueError(f"unknown worker mode {mode!r} (threads, processes, asyncio)")
