"""A job's in-memory bookkeeping (the persisted form is ``model.Record``).

Ensures: ``state`` says which container holds the job: READY -> its tube's ready heap, DELAYED ->
its tube's delay heap, RESERVED -> its owner connection's reserved heap, BURIED -> its tube's
buried FIFO. ``deadline_us`` means: the delay deadline (DELAYED), the TTR deadline (RESERVED), the
bury sequence number that orders the buried FIFO across restarts (BURIED), 0 (READY).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stalkd.engine.model import JobState

if TYPE_CHECKING:
    from stalkd.engine.connstate import ConnState
    from stalkd.engine.tube import Tube

__all__ = ["Job", "URGENT_THRESHOLD", "time_left"]

URGENT_THRESHOLD = 1024  # beanstalkd: a ready job with pri < 1024 is "urgent"
US = 1_000_000


class Job:
    """One job. Mutable on purpose: a million of these live in memory, so ``__slots__`` and no
    per-transition copies.

    >>> from stalkd.engine.tube import Tube
    >>> j = Job(1, Tube("default", 1), 10, 0, 60, b"hi", JobState.READY, 0)
    >>> j.state.name, j.ttr
    ('READY', 60)
    """

    __slots__ = (
        "id", "tube", "pri", "delay", "ttr", "body", "state", "created_us", "deadline_us",
        "reserves", "timeouts", "releases", "buries", "kicks", "hpos", "owner",
    )  # fmt: skip

    def __init__(
        self,
        id: int,
        tube: Tube,
        pri: int,
        delay: int,
        ttr: int,
        body: bytes,
        state: JobState,
        created_us: int,
    ) -> None:
        self.id = id
        self.tube = tube
        self.pri = pri
        self.delay = delay
        self.ttr = ttr
        self.body = body
        self.state = state
        self.created_us = created_us
        self.deadline_us = 0
        self.reserves = 0
        self.timeouts = 0
        self.releases = 0
        self.buries = 0
        self.kicks = 0
        self.hpos = -1
        self.owner: ConnState | None = None

    def __repr__(self) -> str:
        return f"Job(id={self.id}, tube={self.tube.name!r}, state={self.state.name}, pri={self.pri})"


def time_left(deadline_us: int, now_us: int) -> int:
    """Whole seconds until ``deadline_us``, truncated toward zero (as beanstalkd's integer division).

    >>> time_left(10_500_000, 1_000_000), time_left(0, 1_500_000)
    (9, -1)
    """
    d = deadline_us - now_us
    return d // US if d >= 0 else -((-d) // US)
