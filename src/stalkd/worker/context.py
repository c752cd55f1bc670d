"""What the worker decides about one job (actions, dead-letter records) and the per-job context
that middleware reads and writes while it runs.

Actions and dead-letter records are frozen values; ``JobContext`` is runtime bookkeeping for one
delivery and is mutable on purpose (middleware fill in ``attempt``, ``action``, ``time_limit``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stalkd.worker.serializer import Header

if TYPE_CHECKING:
    from stalkd.worker.app import Task

__all__ = ["Delete", "Release", "Bury", "Defer", "Action", "DeadLetter", "JobContext"]


@dataclass(frozen=True)
class Delete:
    """The job is done: delete it (and free its unique key)."""


@dataclass(frozen=True)
class Release:
    """Another attempt after ``delay`` seconds."""

    delay: int
    priority: int


@dataclass(frozen=True)
class Bury:
    """Dead letter: record ``record`` in the failed tube, then bury the job."""

    priority: int
    record: DeadLetter


@dataclass(frozen=True)
class Defer:
    """A dependency is still pending: re-put a copy after ``delay`` seconds, delete this one.
    (A re-put rather than a release, so waiting does not use up attempts.)"""

    delay: int


Action = Delete | Release | Bury | Defer


@dataclass(frozen=True)
class DeadLetter:
    """Why a job was buried, kept as a JSON job in the app's failed tube (see ``deadletter``).

    >>> r = DeadLetter(job_id=3, tube="t", task="f", attempts=2, error="ValueError('x')",
    ...                traceback="...", failed_at=1.5, body=b"\\x00hi")
    >>> DeadLetter.from_json(r.to_json()) == r
    True
    """

    job_id: int
    tube: str
    task: str
    attempts: int
    error: str
    traceback: str
    failed_at: float
    body: bytes

    def to_json(self) -> bytes:
        fields = {
            "stalkd_dead_letter": 1, "job_id": self.job_id, "tube": self.tube, "task": self.task,
            "attempts": self.attempts, "error": self.error, "traceback": self.traceback,
            "failed_at": self.failed_at, "body_b64": base64.b64encode(self.body).decode(),
        }
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> DeadLetter:
        f = json.loads(data)
        if f.get("stalkd_dead_letter") != 1:
            raise ValueError(f"not a stalkd dead-letter record: {data[:80]!r}")
        return cls(job_id=int(f["job_id"]), tube=f["tube"], task=f["task"],
                   attempts=int(f["attempts"]), error=f["error"], traceback=f["traceback"],
                   failed_at=float(f["failed_at"]), body=base64.b64decode(f["body_b64"]))


def _no_touch() -> None:
    return None


@dataclass(eq=False)
class JobContext:
    """One delivery of one job, as middleware see it."""

    job_id: int
    body: bytes
    task: Task
    header: Header
    payload: Any
    started: float                      # time.monotonic() when processing began
    touch: Callable[[], None] = _no_touch   # thread-safe touch of this job on its connection
    attempt: int | None = None          # 1-based; filled from stats-job on failure (or always, on request)
    exception: BaseException | None = None
    traceback: str | None = None
    result: Any = None
    action: Action | None = None
    time_limit: float | None = None     # seconds; set by the time-limit middleware
    duration: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def tube(self) -> str:
        return self.task.options.tube

    @property
    def ttr(self) -> int:
        """The TTR this job was put with (the envelope says when it is not the task's)."""
        return self.header.ttr if self.header.ttr is not None else self.task.options.ttr
