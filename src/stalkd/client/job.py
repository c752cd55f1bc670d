"""The job value the client hands back from ``reserve`` and ``peek``."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Job", "JobLike", "job_id"]


class Job(NamedTuple):
    """A job as the server sent it: its id and its body, byte for byte.

    A NamedTuple (immutable, ``jid, body = job`` works) rather than a dataclass, so that
    ``import stalkd.client`` does not pull in ``dataclasses``/``inspect`` (CLI start-up).

    >>> job = Job(7, b"hello")
    >>> job.id, job.text()
    (7, 'hello')
    """

    id: int
    body: bytes

    def text(self, encoding: str = "utf-8") -> str:
        """The body decoded (strictly: a body that is not valid ``encoding`` raises)."""
        return self.body.decode(encoding)


JobLike = Job | int


def job_id(job: JobLike) -> int:
    """The id of a ``Job`` or of a plain int, checked to be a valid beanstalkd id.

    >>> job_id(Job(3, b"")), job_id(4)
    (3, 4)
    """
    jid = job.id if isinstance(job, Job) else job
    if isinstance(jid, bool) or not isinstance(jid, int):
        raise TypeError(f"job id must be an int or a Job, not {type(jid).__name__}")
    if not 0 <= jid < 2**64:
        raise ValueError(f"job id {jid} is outside 0..2**64-1")
    return jid
