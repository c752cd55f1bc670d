"""The app: ``App`` holds tasks (``task.Task``), middleware and the server address.

>>> app = App("127.0.0.1:11300")
>>> @app.task(tube="emails", max_attempts=3)
... def send(payload: dict) -> None:
...     ...
>>> send.name, send.tube, send.max_attempts
('send', 'emails', 3)

``send.put({"to": "a@b"})`` queues a job (JSON by default); ``stalkd worker module:app`` runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, overload

from stalkd.tubes import FAILED_TUBE
from stalkd.worker.backoff import Backoff
from stalkd.worker.errors import UnknownTask
from stalkd.worker.middleware import Middleware, default_middleware
from stalkd.worker.producer import ServerProducer
from stalkd.worker.serializer import JsonSerializer, Serializer
from stalkd.worker.task import DEFAULT_PRIORITY, Producer, Task, TaskOptions
from stalkd.worker.testing import TestingSession

__all__ = ["App", "Task", "TaskOptions", "DEFAULT_PRIORITY", "FAILED_TUBE"]

P = TypeVar("P")


class App:
    """Tasks, middleware and the server address: what ``stalkd worker module:app`` runs."""

    def __init__(self, address: str = "127.0.0.1:11300", *, serializer: Serializer | None = None,
                 middleware: Iterable[Middleware] | None = None, failed_tube: str = FAILED_TUBE,
                 client_timeout: float = 10.0, unique_ttl: float | None = None) -> None:
        self.address = address
        self.unique_ttl = unique_ttl
        self.serializer: Serializer = serializer or JsonSerializer()
        self.failed_tube = failed_tube
        self.client_timeout = client_timeout
        self.tasks: dict[str, Task[Any]] = {}
        if middleware is None:
            middleware = default_middleware()
        self.middleware: list[Middleware] = list(middleware)
        self._server_producer: Producer | None = None
        self._override: Producer | None = None
        self._lock = threading.Lock()

    @overload
    def task(self, fn: Callable[[P], Any], /, *, name: str | None = ...) -> Task[P]: ...
    @overload
    def task(self, /, *, name: str | None = ..., tube: str | None = ..., priority: int = ...,
             ttr: int = ..., max_attempts: int = ..., backoff: Backoff | None = ...,
             time_limit: float | None = ..., validate: Callable[[Any], None] | None = ...,
             depends_poll: int = ...) -> Callable[[Callable[[P], Any]], Task[P]]: ...

    def task(self, fn: Callable[[Any], Any] | None = None, /, *, name: str | None = None,
             tube: str | None = None, priority: int = DEFAULT_PRIORITY, ttr: int = 120,
             max_attempts: int = 5, backoff: Backoff | None = None,
             time_limit: float | None = None, validate: Callable[[Any], None] | None = None,
             depends_poll: int = 1) -> Task[Any] | Callable[[Callable[[Any], Any]], Task[Any]]:
        """Register a function as a task (``@app.task`` or ``@app.task(tube=..., ...)``).

        The tube defaults to the task name. ``validate(payload)`` raises to reject a payload at
        put time. ``max_attempts`` counts the first run.
        """
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if not 1 <= ttr <= 2**32 - 1:
            raise ValueError(f"ttr must be in [1, 2**32-1] seconds, got {ttr}")

        def register(f: Callable[[Any], Any]) -> Task[Any]:
            task_name = name or f.__name__
            if task_name in self.tasks:
                raise ValueError(f"task {task_name!r} is already registered")
            opts = TaskOptions(tube=tube or task_name, priority=priority, ttr=ttr,
                               max_attempts=max_attempts, backoff=backoff or Backoff(),
                               time_limit=time_limit, depends_poll=depends_poll)
            t: Task[Any] = Task(self, f, task_name, opts, validate)
            self.tasks[task_name] = t
            return t

        return register(fn) if fn is not None else register

    def add_middleware(self, m: Middleware) -> None:
        self.middleware.append(m)

    @property
    def tubes(self) -> list[str]:
        """Tubes the worker watches, in registration order."""
        return list(dict.fromkeys(t.tube for t in self.tasks.values()))

    def task_for(self, name: str | None, tube: str | None, job_id: int) -> Task[Any]:
        """The task a job belongs to: by name from its envelope, or the tube's only task."""
        if name is not None:
            task = self.tasks.get(name)
            if task is None:
                raise UnknownTask(f"job {job_id}: no task named {name!r} in this app "
                                  f"(known: {', '.join(sorted(self.tasks)) or 'none'})")
            return task
        candidates = [t for t in self.tasks.values() if tube is None or t.tube == tube]
        if len(candidates) != 1:
            raise UnknownTask(f"job {job_id}: bare body (no stalkd envelope) and "
                              f"{len(candidates)} candidate tasks for tube {tube!r}")
        return candidates[0]

    @property
    def producer(self) -> Producer:
        if self._override is not None:
            return self._override
        with self._lock:
            if self._server_producer is None:
                from stalkd.worker.ops import AsyncServerOps, ServerOps

                address, timeout = self.address, self.client_timeout
                self._server_producer = ServerProducer(
                    lambda: ServerOps(address, timeout=timeout), unique_ttl=self.unique_ttl,
                    aconnect=lambda: AsyncServerOps.open(address, timeout=timeout))
            return self._server_producer

    def cancel(self, job_id: int) -> bool:
        """Cancel a job that has not started (ready, delayed, or buried), freeing its unique
        key; False when there is no such job or a worker is running it.

        >>> app = App(middleware=[]); t = app.task(lambda p: None, name="t")
        >>> with app.testing():
        ...     job = t.put(1, delay=60)
        ...     app.cancel(job), app.cancel(job)
        (True, False)
        """
        return self.producer.cancel(job_id)

    @contextmanager
    def testing(self, *, eager: bool = False, raise_errors: bool = True) -> Iterator[TestingSession]:
        """In-process mode for users' tests: ``put`` runs the job at once (``eager``) or
        collects it for ``consume_one()``; no server is needed. See ``stalkd.worker.testing``."""
        session = TestingSession(self, eager=eager, raise_errors=raise_errors,
                                 unique_ttl=self.unique_ttl)
        previous, self._override = self._override, session
        try:
            yield session
        finally:
            self._override = previous
