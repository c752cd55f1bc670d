"""A tube: its ready heap, delay heap, buried FIFO, pause and waiting reservers.

Ensures: every job in ``ready`` is READY and keyed ``pack(pri, id)``; every job in ``delayed``
is DELAYED and keyed ``pack(deadline_us, id)``; ``buried`` holds BURIED jobs oldest first;
``urgent`` counts READY jobs with pri < 1024; ``waiting`` holds connections blocked in reserve
that watch this tube, in arrival order.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, TypeVar

from stalkd.engine.heap import IndexedHeap

if TYPE_CHECKING:
    from stalkd.engine.connstate import ConnState
    from stalkd.engine.job import Job

__all__ = ["Tube", "remove_swap_last"]

T = TypeVar("T")


class Tube:
    """One tube. ``serial`` is its creation number (a tie-breaker in the engine's timer heap).

    >>> t = Tube("default", 1)
    >>> t.name, len(t.ready), t.is_paused(0)
    ('default', 0, False)
    """

    __slots__ = (
        "name", "serial", "ready", "delayed", "buried", "waiting", "pause_until_us",
        "pause_secs", "using", "watching", "total_jobs", "cmd_delete", "cmd_pause",
        "urgent", "reserved", "hpos", "slot",
    )  # fmt: skip

    def __init__(self, name: str, serial: int) -> None:
        self.name = name
        self.serial = serial
        self.ready: IndexedHeap[Job] = IndexedHeap()
        self.delayed: IndexedHeap[Job] = IndexedHeap()
        self.buried: OrderedDict[int, Job] = OrderedDict()
        self.waiting: OrderedDict[int, ConnState] = OrderedDict()
        self.pause_until_us = 0  # paused while now < pause_until_us
        self.pause_secs = 0
        self.using = 0
        self.watching = 0
        self.total_jobs = 0
        self.cmd_delete = 0
        self.cmd_pause = 0
        self.urgent = 0
        self.reserved = 0
        self.hpos = -1  # position in the engine's tube-timer heap
        self.slot = -1  # position in the engine's creation-ordered tube list

    def __repr__(self) -> str:
        return f"Tube({self.name!r})"

    def is_paused(self, now_us: int) -> bool:
        return now_us < self.pause_until_us

    def job_count(self) -> int:
        return len(self.ready) + len(self.delayed) + len(self.buried) + self.reserved

    def unreferenced(self) -> bool:
        """True when beanstalkd would free the tube: no jobs, no user, no watcher."""
        return self.using == 0 and self.watching == 0 and self.job_count() == 0

    def timer_us(self) -> int | None:
        """The next instant this tube needs the engine's attention (delay expiry or pause end)."""
        top = self.delayed.peek()
        t = top.deadline_us if top is not None else None
        if self.pause_until_us:
            t = self.pause_until_us if t is None else min(t, self.pause_until_us)
        return t


def remove_swap_last(items: list[T], i: int) -> None:
    """Remove ``items[i]`` by moving the last item into its slot: beanstalkd's list order rule
    for list-tubes and list-tubes-watched.

    >>> xs = ["default", "a", "b", "c"]; remove_swap_last(xs, 1); xs
    ['default', 'c', 'b']
    """
    last = items.pop()
    if i < len(items):
        items[i] = last
