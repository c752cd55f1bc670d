"""Task results: what a job returned (or how it failed), kept for a time-to-live.

A task declared with ``result_ttl`` (or an app with ``App(result_ttl=...)``) has its outcome
stored by the worker *before* the job is deleted or buried, so whoever sees the job gone can
read its result. ``task.put`` returns a :class:`JobHandle` (an ``int``, the job id) whose
``result()``, ``aresult()`` and ``status()`` read it back.

Storage is a :class:`ResultBackend`: by default :class:`ServerResults`, the stalkd server that
holds the jobs (``result-put``/``result-get``, durable in its WAL, expired by its timer); with
Debian's beanstalkd, which has no such commands, pick ``stalkd.worker.sqlresults.SqlResults``
(PostgreSQL, SQLite) or your own backend. :class:`MemoryResults` serves ``app.testing()``.

An outcome is the app's serializer applied to ``{"status": "done", "value": v}`` or
``{"status": "failed", "error": {"type", "message", "traceback"}}``.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from stalkd.client import Client, errors

__all__ = ["ResultBackend", "ServerResults", "MemoryResults", "ResultsUnsupported", "Outcome",
           "TaskFailed", "NoResultsKept", "JobHandle", "ResultHost", "encode_outcome", "decode_outcome",
           "NO_RESULT_SERVER", "InputMissing", "gathered", "waiting", "finished"]

NO_RESULT_SERVER = ("the server at {address} does not keep results (it answered UNKNOWN_COMMAND "
                    "to {command}: Debian's beanstalkd?); run stalkd there, or give the app "
                    "another backend, e.g. App(results=SqlResults('sqlite:///results.db')) "
                    "from stalkd.worker.sqlresults")


class ResultsUnsupported(RuntimeError):
    """The results backend cannot work here (a server without ``result-put``)."""


class InputMissing(Exception):
    """A group's callback or a chain's link found an input's result missing or failed (it
    expired, or the input was deleted by hand after failing): running it again cannot help."""

    retryable = False


class ResultBackend(Protocol):
    """Where outcomes are kept: bytes by job id until a time-to-live runs out."""

    def store(self, job_id: int, data: bytes, ttl: float, *, via: Client | None = None) -> None:
        """Keep ``data`` as ``job_id``'s outcome for ``ttl`` seconds, replacing an earlier one.
        ``via``: the worker's connection to the job's server (a server backend may use it)."""
        ...

    def fetch(self, job_id: int) -> bytes | None:
        """The outcome stored for ``job_id``; None when none is stored or it expired."""
        ...


class ServerResults:
    """Results kept by the stalkd server that holds the jobs (its ``result-put`` and
    ``result-get``): durable in its WAL, expired by its timer, one connection per thread."""

    def __init__(self, address: str, *, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self._local = threading.local()

    def _client(self) -> Client:
        c: Client | None = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = Client(self.address, timeout=self.timeout)
        return c

    def store(self, job_id: int, data: bytes, ttl: float, *, via: Client | None = None) -> None:
        try:
            (via or self._client()).result_put(job_id, max(1, math.ceil(ttl)), data)
        except errors.UnknownCommand:
            raise ResultsUnsupported(NO_RESULT_SERVER.format(address=self.address, command="result-put")) from None

    def fetch(self, job_id: int) -> bytes | None:
        try:
            return self._client().result_get(job_id)
        except errors.NotFound:
            return None
        except errors.UnknownCommand:
            raise ResultsUnsupported(NO_RESULT_SERVER.format(address=self.address, command="result-get")) from None

    def close(self) -> None:
        c: Client | None = getattr(self._local, "client", None)
        if c is not None:
            c.close()
            self._local.client = None


class MemoryResults:
    """Results in this process (``app.testing()``, or a backend for tests); ``clock`` is
    injectable so expiry is tested without waiting."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._held: dict[int, tuple[float, bytes]] = {}
        self._lock = threading.Lock()

    def store(self, job_id: int, data: bytes, ttl: float, *, via: Client | None = None) -> None:
        with self._lock:
            self._held[job_id] = (self.clock() + ttl, bytes(data))

    def fetch(self, job_id: int) -> bytes | None:
        with self._lock:
            held = self._held.get(job_id)
            if held is None:
                return None
            if held[0] <= self.clock():
                del self._held[job_id]
                return None
            return held[1]


@dataclass(frozen=True)
class Outcome:
    """A stored outcome, decoded: ``value`` when done, the error's parts when failed."""

    status: Literal["done", "failed", "waiting"]
    value: Any = None
    error_type: str = ""
    message: str = ""
    traceback: str = ""


class TaskFailed(Exception):
    """``result()`` of a job whose task failed for good (its error's type, message and the
    worker's traceback are attributes)."""

    def __init__(self, job_id: int, outcome: Outcome) -> None:
        super().__init__(f"job {job_id} failed: {outcome.error_type}: {outcome.message}")
        self.job_id = job_id
        self.error_type = outcome.error_type
        self.message = outcome.message
        self.traceback = outcome.traceback


class NoResultsKept(RuntimeError):
    """``result()`` of a job whose task keeps no results: no result will ever come, so the
    call fails at once instead of waiting out its timeout."""


class _Serializer(Protocol):
    def dumps(self, payload: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


def encode_outcome(serializer: _Serializer, *, value: Any = None,
                   error: BaseException | None = None, traceback: str = "") -> bytes:
    """The stored form of a job's outcome (see the module docstring).

    >>> from stalkd.worker.serializer import JsonSerializer
    >>> s = JsonSerializer()
    >>> decode_outcome(s, encode_outcome(s, value={"n": 1}))
    Outcome(status='done', value={'n': 1}, error_type='', message='', traceback='')
    >>> decode_outcome(s, encode_outcome(s, error=KeyError("k"))).error_type
    'KeyError'
    """
    if error is not None:
        return serializer.dumps({"status": "failed", "error": {
            "type": type(error).__name__, "message": str(error), "traceback": traceback}})
    return serializer.dumps({"status": "done", "value": value})


def decode_outcome(serializer: _Serializer, data: bytes) -> Outcome:
    """An outcome stored by :func:`encode_outcome`."""
    d = serializer.loads(data)
    if not isinstance(d, dict) or d.get("status") not in ("done", "failed", "waiting"):
        raise ValueError(f"not a stalkd result: {data[:80]!r}")
    if d["status"] == "done":
        return Outcome("done", d.get("value"))
    if d["status"] == "waiting":
        return Outcome("waiting", d.get("job"))
    e = d.get("error") or {}
    return Outcome("failed", None, str(e.get("type", "")), str(e.get("message", "")),
                   str(e.get("traceback", "")))


def finished(serializer: _Serializer, raw: bytes | None) -> bool:
    """Whether a stored outcome is final (done or failed, not a waiting placeholder)."""
    return raw is not None and decode_outcome(serializer, raw).status != "waiting"


def waiting(serializer: _Serializer, copy_id: int) -> bytes:
    """The placeholder kept while a job waits for its dependencies under another id."""
    return serializer.dumps({"status": "waiting", "job": copy_id})


def gathered(serializer: _Serializer, header: Any, raws: list[bytes | None]) -> Any:
    """A group callback's or chain link's payload from its inputs' stored outcomes: the list
    of their values (``header.gather``) or the one input's value; InputMissing otherwise."""
    values = []
    for jid, raw in zip(header.inputs, raws, strict=True):
        got = None if raw is None else decode_outcome(serializer, raw)
        if got is None or got.status == "waiting":
            raise InputMissing(f"input job {jid} has no result (expired, or never stored)")
        if got.status == "failed":
            raise InputMissing(f"input job {jid} failed: {got.error_type}: {got.message}")
        values.append(got.value)
    return values if header.gather else values[0]


class ResultHost(Protocol):
    """What a handle needs from its app."""

    @property
    def results(self) -> ResultBackend: ...

    @property
    def serializer(self) -> _Serializer: ...

    def job_state(self, job_id: int) -> str | None: ...


_FIRST_POLL, _MAX_POLL = 0.005, 0.25


class JobHandle(int):
    """A job id (it *is* the ``int``, printed and pickled as one) that can read the job's
    status and stored result.

    ``status()``: the server's state while the job exists (``ready``, ``delayed``,
    ``reserved``, ``buried``), then ``done`` or ``failed`` while its result lives (``waiting``
    while a job of a group or chain waits for its inputs under a new id), else ``unknown``. ``result(timeout)``: the value the task returned, waiting for it (polling the
    backend, with growing pauses); raises :class:`TaskFailed` if it failed for good and
    ``TimeoutError`` if no result came in time, :class:`NoResultsKept` at once if the job's
    task keeps no results (``no_results``: the task's name, given by ``Task.put``).
    """

    host: ResultHost
    no_results: str | None
    duplicate: bool  # a put whose unique key was held: this is the job holding it

    def __new__(cls, job_id: int, host: ResultHost, *, no_results: str | None = None,
                duplicate: bool = False) -> JobHandle:
        self = super().__new__(cls, job_id)
        self.host = host
        self.no_results = no_results
        self.duplicate = duplicate
        return self

    def _check_kept(self) -> None:
        if self.no_results is not None:
            raise NoResultsKept(f"job {int(self)}: task {self.no_results} keeps no results (set "
                                f"result_ttl=SECONDS on the task, or on the App for every task)")

    def __reduce__(self) -> tuple[type[int], tuple[int]]:
        return int, (int(self),)  # pickled (to another process) as the plain id

    def outcome(self) -> Outcome | None:
        """The stored outcome now, or None."""
        data = self.host.results.fetch(int(self))
        return None if data is None else decode_outcome(self.host.serializer, data)

    def status(self) -> str:
        state = self.host.job_state(int(self))
        if state is not None and state != "reserved":
            return state
        got = self.outcome()
        if state is not None:  # reserved: "done" once stored, while the worker deletes it
            return "done" if got is not None and got.status == "done" else state
        return "unknown" if got is None else got.status

    def _ready(self) -> Outcome | None:
        got = self.outcome()
        return None if got is None or got.status == "waiting" else got

    def _value(self, got: Outcome) -> Any:
        """The value of a finished outcome (``_pending`` outcomes are not finished)."""
        if got.status == "failed":
            raise TaskFailed(int(self), got)
        return got.value

    def result(self, timeout: float | None = None) -> Any:
        self._check_kept()
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = _FIRST_POLL
        while True:
            got = self._ready()
            if got is not None:
                return self._value(got)
            wait = pause
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {int(self)}: no result within {timeout}s "
                                       f"(status: {self.status()})")
                wait = min(pause, left)
            time.sleep(wait)
            pause = min(pause * 2, _MAX_POLL)

    async def aresult(self, timeout: float | None = None) -> Any:
        """``result`` for asyncio code: the backend is asked on a thread, the loop waits."""
        self._check_kept()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        pause = _FIRST_POLL
        while True:
            got = await asyncio.to_thread(self._ready)
            if got is not None:
                return self._value(got)
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"job {int(self)}: no result within {timeout}s")
            wait = pause if deadline is None else min(pause, max(0.0, deadline - loop.time()))
            await asyncio.sleep(wait)
            pause = min(pause * 2, _MAX_POLL)
