"""The task registry: ``App`` holds tasks and middleware; ``Task`` validates, serializes and puts.

>>> app = App("127.0.0.1:11300")
>>> @app.task(tube="emails", max_attempts=3)
... def send(payload: dict) -> None:
...     ...
>>> send.name, send.tube, send.max_attempts
('send', 'emails', 3)

``send.put({"to": "a@b"})`` queues a job (JSON by default); ``stalkd worker module:app`` runs it.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, overload

from stalkd.worker.backoff import Backoff
from stalkd.worker.errors import UnknownTask, ValidationError
from stalkd.worker.middleware.base import Middleware
from stalkd.worker.serializer import Header, JsonSerializer, Serializer, encode_envelope

if TYPE_CHECKING:
    from stalkd.worker.testing import TestingSession

__all__ = ["App", "Task", "TaskOptions", "DEFAULT_PRIORITY", "FAILED_TUBE"]

DEFAULT_PRIORITY = 2**31
FAILED_TUBE = "stalkd.failed"


class Producer(Protocol):
    """Where ``Task.put`` sends jobs: a real server, or the in-process test broker."""

    def put_job(self, task: Task, payload: Any, *, delay: int, priority: int, ttr: int,
                key: str | None, deps: tuple[str, ...]) -> int | None: ...


@dataclass(frozen=True)
class TaskOptions:
    """A task's queueing policy (what ``@app.task(...)`` was given)."""

    tube: str
    priority: int = DEFAULT_PRIORITY
    ttr: int = 120
    max_attempts: int = 5
    backoff: Backoff = Backoff()
    time_limit: float | None = None
    depends_poll: int = 1        # seconds between checks of a pending dependency


class Task:
    """A registered function. Call it to run it directly; ``put`` it to queue it."""

    def __init__(self, app: App, fn: Callable[..., Any], name: str, options: TaskOptions,
                 validate: Callable[[Any], None] | None) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.options = options
        self.validate = validate
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__

    # Short names for what middleware read most.
    tube = property(lambda self: self.options.tube)
    priority = property(lambda self: self.options.priority)
    ttr = property(lambda self: self.options.ttr)
    max_attempts = property(lambda self: self.options.max_attempts)
    backoff = property(lambda self: self.options.backoff)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} tube={self.tube!r}>"

    def check(self, payload: Any) -> bytes:
        """Validate and serialize ``payload``; raises ValidationError before anything is queued."""
        if self.validate is not None:
            try:
                self.validate(payload)
            except ValidationError:
                raise
            except Exception as exc:
                raise ValidationError(f"task {self.name}: payload rejected: {exc}") from exc
        try:
            return self.app.serializer.dumps(payload)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"task {self.name}: payload cannot be serialized: {exc}") from exc

    def encode(self, payload: Any, *, key: str | None = None, marker: int | None = None,
               deps: Sequence[str] = (), ttr: int | None = None) -> bytes:
        """The job body for ``payload`` (what ``put`` sends; the outbox stores it too).
        ``ttr``: the TTR the job will be put with, when not the task's."""
        header = Header(task=self.name, key=key, marker=marker, deps=tuple(deps),
                        ttr=None if ttr in (None, self.ttr) else ttr)
        return encode_envelope(header, self.check(payload))

    def put(self, payload: Any, *, delay: int = 0, priority: int | None = None,
            ttr: int | None = None, key: str | None = None,
            depends_on: Iterable[str] = ()) -> int | None:
        """Queue ``payload``; returns the job id, or None when ``key`` is already held by a
        pending job (a duplicate put is a no-op). ``depends_on`` lists unique keys whose jobs
        must complete first."""
        return self.app.producer.put_job(
            self, payload, delay=delay, priority=self.priority if priority is None else priority,
            ttr=self.ttr if ttr is None else ttr, key=key, deps=tuple(depends_on))


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
        self.tasks: dict[str, Task] = {}
        if middleware is None:
            from stalkd.worker.middleware import default_middleware

            middleware = default_middleware()
        self.middleware: list[Middleware] = list(middleware)
        self._server_producer: Producer | None = None
        self._override: Producer | None = None
        self._lock = threading.Lock()

    @overload
    def task(self, fn: Callable[..., Any], /, *, name: str | None = ...) -> Task: ...
    @overload
    def task(self, /, *, name: str | None = ..., tube: str | None = ..., priority: int = ...,
             ttr: int = ..., max_attempts: int = ..., backoff: Backoff | None = ...,
             time_limit: float | None = ..., validate: Callable[[Any], None] | None = ...,
             depends_poll: int = ...) -> Callable[[Callable[..., Any]], Task]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
             tube: str | None = None, priority: int = DEFAULT_PRIORITY, ttr: int = 120,
             max_attempts: int = 5, backoff: Backoff | None = None,
             time_limit: float | None = None, validate: Callable[[Any], None] | None = None,
             depends_poll: int = 1) -> Task | Callable[[Callable[..., Any]], Task]:
        """Register a function as a task (``@app.task`` or ``@app.task(tube=..., ...)``).

        The tube defaults to the task name. ``validate(payload)`` raises to reject a payload at
        put time. ``max_attempts`` counts the first run.
        """
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if not 1 <= ttr <= 2**32 - 1:
            raise ValueError(f"ttr must be in [1, 2**32-1] seconds, got {ttr}")

        def register(f: Callable[..., Any]) -> Task:
            task_name = name or f.__name__
            if task_name in self.tasks:
                raise ValueError(f"task {task_name!r} is already registered")
            opts = TaskOptions(tube=tube or task_name, priority=priority, ttr=ttr,
                               max_attempts=max_attempts, backoff=backoff or Backoff(),
                               time_limit=time_limit, depends_poll=depends_poll)
            t = Task(self, f, task_name, opts, validate)
            self.tasks[task_name] = t
            return t

        return register(fn) if fn is not None else register

    def add_middleware(self, m: Middleware) -> None:
        self.middleware.append(m)

    @property
    def tubes(self) -> list[str]:
        """Tubes the worker watches, in registration order."""
        return list(dict.fromkeys(t.tube for t in self.tasks.values()))

    def task_for(self, name: str | None, tube: str | None, job_id: int) -> Task:
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
                from stalkd.worker.producer import ServerProducer

                self._server_producer = ServerProducer(self, unique_ttl=self.unique_ttl)
            return self._server_producer

    @contextmanager
    def testing(self, *, eager: bool = False, raise_errors: bool = True) -> Iterator[TestingSession]:
        """In-process mode for users' tests: ``put`` runs the job at once (``eager``) or
        collects it for ``consume_one()``; no server is needed. See ``stalkd.worker.testing``."""
        from stalkd.worker.testing import TestingSession

        session = TestingSession(self, eager=eager, raise_errors=raise_errors)
        previous, self._override = self._override, session
        try:
            yield session
        finally:
            self._override = previous
