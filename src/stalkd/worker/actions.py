"""What the worker decides to do with a delivered job (``WorkerAction``), and the dead-letter
record it keeps for a job it gives up on.

These are decisions, not protocol commands: the delivery pipeline (``pipeline``) turns each into
the server calls that carry it out, in an order that never loses a job. All are frozen values.
"""

from __future__ import annotations

import base64
import json
import traceback as tb
from dataclasses import dataclass

__all__ = ["Complete", "RetryLater", "GiveUp", "WaitForDeps", "Recheck", "WorkerAction",
           "DeadLetter", "dead_letter"]


@dataclass(frozen=True)
class Complete:
    """The job is done: delete it (and free its unique key)."""


@dataclass(frozen=True)
class RetryLater:
    """Another attempt after ``delay`` seconds (the job is released)."""

    delay: int
    priority: int


@dataclass(frozen=True)
class GiveUp:
    """No more attempts: keep ``record`` in the failed tube, then bury the job."""

    priority: int
    record: DeadLetter


@dataclass(frozen=True)
class WaitForDeps:
    """The dependency ``key`` is still pending: re-put a copy delayed ``delay`` seconds, delete
    this one, and register the copy to be woken as soon as ``key`` is freed (``unique``); the
    delay only bounds the wait should that wake be lost. (A re-put rather than a release, so
    waiting does not use up attempts.)"""

    delay: int
    key: str | None = None


@dataclass(frozen=True)
class Recheck:
    """Another copy of this waiting job may be the one to run (``copies``): release this one
    and look again after ``delay`` seconds. Rare (a crash, or a copy woken before the delete of
    what it copies landed); it counts as one release in the job's stats."""

    delay: int


WorkerAction = Complete | RetryLater | GiveUp | WaitForDeps | Recheck


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


def dead_letter(job_id: int, body: bytes, exc: BaseException, *, tube: str = "?", task: str = "?",
                attempts: int = 1, traceback: str | None = None, now: float) -> DeadLetter:
    """The record for a job given up after ``exc`` (the one place such records are built).

    >>> dead_letter(7, b"x", ValueError("bad"), now=0.0).error
    'ValueError: bad'
    """
    if traceback is None:
        traceback = "".join(tb.format_exception(exc))
    return DeadLetter(job_id=job_id, tube=tube, task=task, attempts=attempts,
                      error=f"{type(exc).__name__}: {exc}", traceback=traceback,
                      failed_at=now, body=body)
