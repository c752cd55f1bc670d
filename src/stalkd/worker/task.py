"""A task: a registered function with its queueing policy, which validates, serializes and puts.

>>> from stalkd.worker.app import App
>>> app = App()
>>> @app.task(tube="emails", ttr=600)
... def send(payload: dict[str, str]) -> None:
...     ...
>>> send.name, send.tube, send.ttr
('send', 'emails', 600)

``Task`` is generic in its payload type, so ``mypy --strict`` checks ``send.put(...)``.

A function that does not take exactly one payload (``def add(a: int, b: int)``) becomes a
``CallTask``, put as it is called (Celery's ``delay``, RQ's ``enqueue``, Dramatiq's ``send``),
its parameters checked by mypy through a ``ParamSpec``:

>>> @app.task
... def add(a: int, b: int) -> int:
...     return a + b
>>> type(add).__name__, add(2, 3)
('CallTask', 5)
>>> with app.testing() as t:
...     _ = add.put(2, b=3)          # add.apply((2,), {"b": 3}, delay=10) for put's options
...     t.queued[0].body.splitlines()[1]
b'{"args":[2],"kwargs":{"b":3}}'
"""

from __future__ import annotations

import datetime as dt
import inspect
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from stalkd.worker.backoff import Backoff
from stalkd.worker.errors import ValidationError
from stalkd.worker.results import JobHandle, ResultBackend
from stalkd.worker.serializer import Header, Serializer, encode_envelope

__all__ = ["Task", "CallTask", "takes_payload", "TaskOptions", "Signature", "Producer", "TaskHost", "DEFAULT_PRIORITY", "delay_seconds"]

DEFAULT_PRIORITY = 2**31
P = TypeVar("P")  # the payload type a task's function takes
A = ParamSpec("A")  # the parameters of a CallTask's function


class Producer(Protocol):
    """Where ``Task.put`` sends jobs: a real server, or the in-memory one of ``app.testing()``."""

    def put_job(self, task: Task[Any], payload: Any, *, delay: int, priority: int, ttr: int,
                key: str | None, deps: tuple[str, ...], inputs: tuple[int, ...] = (),
                gather: bool = False, result_ttl: float | None = None) -> int | None: ...

    def put_jobs(self, task: Task[Any], payloads: Iterable[Any], *, delay: int, priority: int,
                 ttr: int) -> list[int]: ...

    async def aput_job(self, task: Task[Any], payload: Any, *, delay: int, priority: int,
                       ttr: int, deps: tuple[str, ...]) -> int: ...

    def cancel(self, job_id: int) -> bool: ...

    def holder(self, key: str) -> int | None:
        """The id of the pending job holding unique ``key``, None when none is known."""
        ...

    def job_state(self, job_id: int) -> str | None:
        """The job's state (ready, delayed, reserved, buried), None when it is gone."""
        ...


Delay = int | float | dt.timedelta


def delay_seconds(delay: Delay, at: dt.datetime | None, now: float) -> int:
    """The protocol's whole seconds of delay for ``delay`` or a run time ``at`` (a naive
    ``at`` is local time); a time in the past means now.

    >>> delay_seconds(dt.timedelta(minutes=2), None, now=0.0)
    120
    >>> delay_seconds(0, dt.datetime(2026, 1, 1, 0, 0, 30, tzinfo=dt.UTC), now=1767225600.0)
    30
    """
    if at is not None:
        if delay:
            raise ValueError("give delay= or at=, not both")
        return max(0, math.ceil(at.timestamp() - now))
    seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else delay
    if seconds < 0:
        raise ValueError(f"delay must not be negative, got {delay!r}")
    return math.ceil(seconds)


class TaskHost(Protocol):
    """What a task needs from its app."""

    @property
    def serializer(self) -> Serializer: ...

    @property
    def producer(self) -> Producer: ...

    @property
    def results(self) -> ResultBackend: ...

    def job_state(self, job_id: int) -> str | None: ...


@dataclass(frozen=True)
class TaskOptions:
    """A task's queueing policy (what ``@app.task(...)`` was given)."""

    tube: str
    priority: int = DEFAULT_PRIORITY
    ttr: int = 120
    max_attempts: int = 5
    backoff: Backoff = Backoff()
    time_limit: float | None = None
    depends_poll: int = 60       # at most this long a waiting job sleeps should its wake-up be lost
    result_ttl: float | None = None  # seconds an outcome is kept (None: not stored)


_NO_PAYLOAD: Any = object()


@dataclass(frozen=True)
class Signature:
    """A task and its payload, not yet put (``task.s(payload)``), for groups and chains
    (``stalkd.worker.canvas``). Without a payload, a chain link or a group's callback gets its
    inputs' results as its payload."""

    task: Task[Any]
    payload: Any = _NO_PAYLOAD

    @property
    def has_payload(self) -> bool:
        return self.payload is not _NO_PAYLOAD


class Task(Generic[P]):
    """A registered function. Call it to run it directly; ``put`` it to queue it."""

    def __init__(self, app: TaskHost, fn: Callable[[P], Any], name: str, options: TaskOptions,
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

    def __call__(self, payload: P) -> Any:
        return self.fn(payload)

    def __repr__(self) -> str:
        return f"<Task {self.name} tube={self.tube!r}>"

    def s(self, payload: Any = _NO_PAYLOAD) -> Signature:
        """This task with ``payload``, to put later in a group or chain (``stalkd.worker.canvas``)."""
        return Signature(self, payload)

    def check(self, payload: P) -> bytes:
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

    def encode(self, payload: P, *, key: str | None = None, marker: int | None = None,
               deps: Sequence[str] = (), ttr: int | None = None) -> bytes:
        """The job body for ``payload`` (what ``put`` sends; the outbox stores it too).
        ``ttr``: the TTR the job will be put with, when not the task's."""
        header = Header(task=self.name, key=key, marker=marker, deps=tuple(deps),
                        ttr=None if ttr in (None, self.ttr) else ttr)
        return encode_envelope(header, self.check(payload))

    def put(self, payload: P, *, delay: Delay = 0, at: dt.datetime | None = None,
            priority: int | None = None, ttr: int | None = None, key: str | None = None,
            depends_on: Iterable[str] = ()) -> JobHandle | None:
        """Queue ``payload``; returns the job id as a ``JobHandle`` (``.result()``,
        ``.status()``). With ``key`` already held by a pending job, nothing is queued: the
        handle is the existing job's (``.duplicate`` is True), or None in the instant before
        its producer recorded it. It runs after ``delay`` (seconds or a ``timedelta``) or at ``at`` (a
        ``datetime``). ``depends_on`` lists unique keys whose jobs must complete first."""
        job_id = self.app.producer.put_job(
            self, payload, delay=delay_seconds(delay, at, time.time()),
            priority=self.priority if priority is None else priority,
            ttr=self.ttr if ttr is None else ttr, key=key, deps=tuple(depends_on))
        if job_id is None and key is not None:
            existing = self.app.producer.holder(key)
            return None if existing is None else self._handle(existing, duplicate=True)
        return None if job_id is None else self._handle(job_id)

    async def aput(self, payload: P, *, delay: Delay = 0, at: dt.datetime | None = None,
                   priority: int | None = None, ttr: int | None = None,
                   depends_on: Iterable[str] = ()) -> JobHandle:
        """``put`` for asyncio code, on an ``AsyncClient`` of the running loop (the loop is not
        blocked while the server makes the job durable). Unique keys need ``put``."""
        job_id = await self.app.producer.aput_job(
            self, payload, delay=delay_seconds(delay, at, time.time()),
            priority=self.priority if priority is None else priority,
            ttr=self.ttr if ttr is None else ttr, deps=tuple(depends_on))
        return self._handle(job_id)

    def _handle(self, job_id: int, *, duplicate: bool = False) -> JobHandle:
        keeps = self.options.result_ttl is not None
        return JobHandle(job_id, self.app, no_results=None if keeps else self.name,
                         duplicate=duplicate)

    def put_many(self, payloads: Iterable[P], *, delay: Delay = 0, priority: int | None = None,
                 ttr: int | None = None) -> list[int]:
        """Queue many payloads in pipelined writes, with this task's tube, priority and TTR
        (unless given); returns their job ids in order. Every payload is validated before
        anything is sent."""
        return self.app.producer.put_jobs(
            self, payloads, delay=delay_seconds(delay, None, 0.0), priority=self.priority if priority is None else priority,
            ttr=self.ttr if ttr is None else ttr)


def takes_payload(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a one-payload task function: exactly one required positional
    parameter and no required keyword-only one (else it is put as called: ``CallTask``).

    >>> takes_payload(lambda p: p), takes_payload(lambda a, b: a), takes_payload(lambda: 0)
    (True, False, False)
    """
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: as before, one payload
        return True
    kind = inspect.Parameter
    required = [p for p in params if p.default is p.empty
                and p.kind not in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD)]
    return len(required) == 1 and required[0].kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)


class CallTask(Task[dict[str, Any]], Generic[A]):
    """A task put as its function is called: ``add.put(2, b=3)``. The job's payload is
    ``{"args": [...], "kwargs": {...}}`` (through the app's serializer) and the worker calls
    the function with them. ``apply(args, kwargs, delay=..., key=...)`` takes put's options."""

    def __init__(self, app: TaskHost, fn: Callable[A, Any], name: str, options: TaskOptions,
                 validate: Callable[[Any], None] | None) -> None:
        target: Callable[..., Any] = fn
        if inspect.iscoroutinefunction(fn):
            async def run_async(p: dict[str, Any]) -> Any:
                return await target(*p["args"], **p["kwargs"])
            runner: Callable[[dict[str, Any]], Any] = run_async
        else:
            def run(p: dict[str, Any]) -> Any:
                return target(*p["args"], **p["kwargs"])
            runner = run
        super().__init__(app, runner, name, options, validate)
        self.function = fn
        self.__doc__ = fn.__doc__

    def __call__(self, *args: A.args, **kwargs: A.kwargs) -> Any:  # type: ignore[override]
        return self.function(*args, **kwargs)

    def put(self, *args: A.args, **kwargs: A.kwargs) -> JobHandle | None:  # type: ignore[override]
        """Queue a call with these arguments; see ``Task.put`` (``apply`` for its options)."""
        return self.apply(args, kwargs)

    async def aput(self, *args: A.args, **kwargs: A.kwargs) -> JobHandle:  # type: ignore[override]
        """``put`` for asyncio code (see ``Task.aput``)."""
        return await Task.aput(self, _arguments(args, kwargs))

    def apply(self, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, *,
              delay: Delay = 0, at: dt.datetime | None = None, priority: int | None = None,
              ttr: int | None = None, key: str | None = None,
              depends_on: Iterable[str] = ()) -> JobHandle | None:
        """Queue a call with ``args`` and ``kwargs`` and ``Task.put``'s options."""
        return Task.put(self, _arguments(args, kwargs or {}), delay=delay, at=at,
                        priority=priority, ttr=ttr, key=key, depends_on=depends_on)


def _arguments(args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"args": list(args), "kwargs": dict(kwargs)}
