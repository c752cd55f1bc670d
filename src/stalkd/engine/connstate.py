"""A client connection as the engine sees it: used tube, watch list, reserved jobs, pending reserve.

Ensures: ``reserved`` holds exactly the RESERVED jobs whose ``owner`` is this connection, keyed
``pack(deadline_us, id)`` so the soonest TTR is on top; ``waiting`` is True exactly when the
connection is in the ``waiting`` map of every tube it watches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stalkd.engine.heap import IndexedHeap

if TYPE_CHECKING:
    from stalkd.engine.job import Job
    from stalkd.engine.tube import Tube

__all__ = ["ConnState", "SAFETY_MARGIN_US"]

SAFETY_MARGIN_US = 1_000_000  # DEADLINE_SOON fires one second before a reserved job's TTR ends


class ConnState:
    """One connection.

    >>> from stalkd.engine.tube import Tube
    >>> c = ConnState(7, Tube("default", 1)); c.watch[0].name, c.waiting
    ('default', False)
    """

    __slots__ = (
        "id", "use", "watch", "reserved", "waiting", "wait_until_us", "wait_seq",
        "producer", "worker", "half_closed", "hpos", "kick",
    )  # fmt: skip

    def __init__(self, conn_id: int, default: Tube) -> None:
        self.id = conn_id
        self.use = default
        self.watch: list[Tube] = [default]
        self.reserved: IndexedHeap[Job] = IndexedHeap()
        self.waiting = False
        self.wait_until_us: int | None = None  # reserve-with-timeout deadline; None = forever
        self.wait_seq = 0
        self.producer = False
        self.worker = False
        self.half_closed = False
        self.hpos = -1  # position in the engine's connection-timer heap
        # A kick in progress, done a step at a time: [tube, buried?, jobs left, jobs kicked].
        self.kick: list[Any] | None = None

    def __repr__(self) -> str:
        return f"ConnState({self.id})"

    def soonest_deadline(self) -> int | None:
        top = self.reserved.peek()
        return top.deadline_us if top is not None else None

    def deadline_soon(self, now_us: int) -> bool:
        """beanstalkd's ``conndeadlinesoon``: a reserved job is within the 1 s safety margin."""
        d = self.soonest_deadline()
        return d is not None and now_us >= d - SAFETY_MARGIN_US

    def timer_us(self) -> int | None:
        """When this connection next needs attention: a TTR expiry, or, while waiting, the
        reserve timeout or the start of the safety margin (beanstalkd's ``connsched``)."""
        d = self.soonest_deadline()
        t = d
        if self.waiting:
            if d is not None:
                t = d - SAFETY_MARGIN_US
            if self.wait_until_us is not None:
                t = self.wait_until_us if t is None else min(t, self.wait_until_us)
        return t
