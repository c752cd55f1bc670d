"""The barriers' gate of a node under a lease: no acknowledgement leaves unless the lease is
alive at that moment.

``server/barriers.py`` releases a held reply once its batch is durable here and its gate's
``replicated`` has reached the batch; it reads ``replicated`` right before releasing. This gate
answers the inner gate's value (the sync standbys', ``replication.gate.SyncGate``; without one,
every batch) while ``alive()`` says the lease holds, and 0 otherwise, so a node that lost its
lease, or woke from a pause longer than the lease, releases nothing more: the check is made on
the monotonic clock at the moment of release, as a lease holder must.

>>> ok = [True]
>>> g = LeaseGate(lambda: ok[0]); g.replicated > 10**15
True
>>> ok[0] = False; g.replicated
0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["LeaseGate"]

_ALL = 2**62  # every batch: no inner gate holds any back


class InnerGate(Protocol):
    replicated: int

    def note(self, batch: int, end_offset: int) -> None: ...


class LeaseGate:
    def __init__(self, alive: Callable[[], bool], inner: InnerGate | None = None) -> None:
        self.alive = alive
        self.inner = inner

    @property
    def replicated(self) -> int:
        if not self.alive():
            return 0
        return _ALL if self.inner is None else self.inner.replicated

    def note(self, batch: int, end_offset: int) -> None:
        if self.inner is not None:
            self.inner.note(batch, end_offset)
