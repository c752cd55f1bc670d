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

import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, ParamSpec, Protocol, TypeVar, overload

from stalkd.tubes import FAILED_TUBE
from stalkd.worker.backoff import Backoff
from stalkd.worker.errors import UnknownTask
from stalkd.worker.middleware import Middleware, default_middleware
from stalkd.worker.producer import ServerProducer
from stalkd.worker.results import ResultBackend, ResultsUnsupported, ServerResults
from stalkd.worker.schedule import Schedule
from stalkd.worker.serializer import JsonSerializer, Serializer
from stalkd.worker.task import (
    DEFAULT_PRIORITY,
    CallTask,
    Producer,
    Task,
    TaskOptions,
    takes_payload,
)
from stalkd.worker.testing import TestingSession

__all__ = ["App", "Task", "TaskOptions", "DEFAULT_PRIORITY", "FAILED_TUBE"]

P = TypeVar("P")
A = ParamSpec("A")


class _Register(Protocol):
    """What ``@app.task(...)`` with options returns: the decorator, typed as ``app.task``."""

    @overload
    def __call__(self, fn: Callable[[P], Any], /) -> Task[P]: ...
    @overload
    def __call__(self, fn: Callable[A, Any], /) -> CallTask[A]: ...


# Each app's lock is new in a forked child (``--mode processes``): another thread of the parent
# (the schedules' thread putting a job, a web request) may have held it at the fork, and the
# child's copy of a lock held then stays held for ever (its first put would wait on it). What the
# lock guards is made once and set in one step, so a child never finds it half made.
_apps: weakref.WeakSet[App] = weakref.WeakSet()


def _renew_locks() -> None:
    for app in list(_apps):
        app._lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_locks)


class App:
    """Tasks, middleware and the server address: what ``stalkd worker module:app`` runs."""

    def __init__(self, address: str = "127.0.0.1:11300", *, serializer: Serializer | None = None,
                 middleware: Iterable[Middleware] | None = None, failed_tube: str = FAILED_TUBE,
                 client_timeout: float = 10.0, unique_ttl: float | None = None,
                 results: ResultBackend | None = None, result_ttl: float | None = None) -> None:
        """``results``: where task outcomes are kept (default: the stalkd server at
        ``address``; see ``stalkd.worker.results``); ``result_ttl``: keep every task's outcome
        that many seconds unless the task says otherwise (default: only tasks that ask)."""
        self.address = address
        self._results = results
        self.result_ttl = result_ttl
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
        self._results_override: ResultBackend | None = None
        self._lock = threading.Lock()
        _apps.add(self)
        self.schedules: dict[str, Schedule] = {}

    @overload
    def task(self, fn: Callable[[P], Any], /, *, name: str | None = ...) -> Task[P]: ...
    @overload
    def task(self, fn: Callable[A, Any], /, *, name: str | None = ...) -> CallTask[A]: ...
    @overload
    def task(self, /, *, name: str | None = ..., tube: str | None = ..., priority: int = ...,
             ttr: int = ..., max_attempts: int = ..., backoff: Backoff | None = ...,
             time_limit: float | None = ..., validate: Callable[[Any], None] | None = ...,
             depends_poll: int = ..., result_ttl: float | None = ...,
             ) -> _Register: ...

    def task(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
             tube: str | None = None, priority: int = DEFAULT_PRIORITY, ttr: int = 120,
             max_attempts: int = 5, backoff: Backoff | None = None,
             time_limit: float | None = None, validate: Callable[[Any], None] | None = None,
             depends_poll: int = 60, result_ttl: float | None = None,
             ) -> Task[Any] | _Register:
        """Register a function as a task (``@app.task`` or ``@app.task(tube=..., ...)``).

        A function of one payload is put with it (``send.put({"to": ...})``); any other
        (``def add(a, b)``) becomes a ``CallTask``, put as it is called (``add.put(2, b=3)``).
        The tube defaults to the task name. ``validate(payload)`` raises to reject a payload at
        put time. ``max_attempts`` counts the first run. ``result_ttl``: keep what it returns
        (or how it failed for good) that many seconds (default: the app's ``result_ttl``).
        """
        if result_ttl is None:
            result_ttl = self.result_ttl
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if not 1 <= ttr <= 2**32 - 1:
            raise ValueError(f"ttr must be in [1, 2**32-1] seconds, got {ttr}")

        def register(f: Callable[..., Any]) -> Task[Any]:
            task_name = name or f.__name__
            if task_name in self.tasks:
                raise ValueError(f"task {task_name!r} is already registered")
            opts = TaskOptions(tube=tube or task_name, priority=priority, ttr=ttr,
                               max_attempts=max_attempts, backoff=backoff or Backoff(),
                               time_limit=time_limit, depends_poll=depends_poll,
                               result_ttl=result_ttl)
            t: Task[Any] = (Task(self, f, task_name, opts, validate) if takes_payload(f)
                            else CallTask(self, f, task_name, opts, validate))
            self.tasks[task_name] = t
            return t

        return register(fn) if fn is not None else register  # type: ignore[return-value]

    def schedule(self, cron: str, task: Task[Any], *, name: str | None = None,
                 payload: Any = None, missed: Literal["skip", "once"] = "skip", grace: float = 60.0,
                 tz: str = "UTC") -> Schedule:
        """Put a ``task`` job at each time ``cron`` matches (five fields, or six with seconds
        last), once per time however many schedulers run (``stalkd scheduler``, or
        ``stalkd worker --schedules``). ``payload``: the job's payload, or a function of the
        slot's ``datetime``. A slot more than ``grace`` seconds old when a scheduler gets to it
        was missed: ``missed="skip"`` or ``"once"`` (one run for all missed slots). See
        ``stalkd.worker.schedule`` and ``stalkd.worker.scheduler``."""
        if task.app is not self:
            raise ValueError(f"{task!r} belongs to another app")
        s = Schedule(name or task.name, cron, task, payload, missed, grace, tz)
        if s.name in self.schedules:
            raise ValueError(f"schedule {s.name!r} is already defined (give name=...)")
        self.schedules[s.name] = s
        return s

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

    @property
    def results(self) -> ResultBackend:
        """Where outcomes are kept (the in-memory one inside ``app.testing()``)."""
        if self._results_override is not None:
            return self._results_override
        with self._lock:
            if self._results is None:
                self._results = ServerResults(self.address, timeout=self.client_timeout)
            return self._results

    def results_unsupported(self) -> str | None:
        """Why this app's tasks cannot keep their results (the default backend on a server
        without ``result-put``, e.g. Debian's beanstalkd), or None; a server that cannot be
        reached now is not a reason (the worker waits for it)."""
        if not any(t.options.result_ttl is not None for t in self.tasks.values()):
            return None
        backend = self.results
        if not isinstance(backend, ServerResults):
            return None
        try:
            backend.fetch(0)
        except ResultsUnsupported as exc:
            return str(exc)
        except OSError:
            return None
        finally:
            backend.close()
        return None

    def job_state(self, job_id: int) -> str | None:
        """The state of job ``job_id`` on the server (ready, delayed, reserved, buried), None
        when it no longer exists (``JobHandle.status`` then reads its result)."""
        return self.producer.job_state(job_id)

    def cancel(self, job_id: int, *, running: bool = False, wait: float = 5.0) -> bool:
        """Cancel a job that has not started (ready, delayed, or buried), freeing its unique
        key; False when there is no such job or a worker is running it. With ``running=True``
        a running job is asked to stop (its handler sees ``stalkd.worker.cancelled()``, or an
        async one ``CancelledError``), waiting up to ``wait`` seconds for it to go; True then
        means the job is gone or its worker has the request (``stalkd.worker.cancel``).

        >>> app = App(middleware=[]); t = app.task(lambda p: None, name="t")
        >>> with app.testing():
        ...     job = t.put(1, delay=60)
        ...     app.cancel(job), app.cancel(job)
        (True, False)
        """
        if self.producer.cancel(job_id):
            return True
        if not running or self._override is not None:  # app.testing() runs nothing meanwhile
            return False
        from stalkd.worker.cancel import request_stop
        from stalkd.worker.ops import ServerOps

        conn = ServerOps(self.address, timeout=self.client_timeout)
        try:
            return request_stop(conn, job_id, wait=wait) != "not found"
        finally:
            conn.close()

    @contextmanager
    def testing(self, *, eager: bool = False, raise_errors: bool = True) -> Iterator[TestingSession]:
        """In-process mode for users' tests: ``put`` runs the job at once (``eager``) or
        collects it for ``consume_one()``; no server is needed. See ``stalkd.worker.testing``."""
        session = TestingSession(self, eager=eager, raise_errors=raise_errors,
                                 unique_ttl=self.unique_ttl)
        previous, self._override = self._override, session
        previous_results, self._results_override = self._results_override, session.results
        try:
            yield session
        finally:
            self._override = previous
            self._results_override = previous_results
