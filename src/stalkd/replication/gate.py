"""``--sync-standbys N``: the group-commit batch that N standbys hold durable (pure).

The server numbers its WAL batches (``server/barriers.py``); after writing batch ``b`` the log
ends at offset ``end``, and ``note(b, end)`` records it. Standbys report the offset their disk
holds (``ack``). A batch is *replicated* once ``need`` standbys have acknowledged its end; the
barrier releases a reply when its batch is durable locally and replicated.

Ensures: ``replicated`` never decreases; it is the newest noted batch whose end offset is at
most the ``need``-th highest acknowledged offset among the standbys connected now (0 when fewer
are connected: nothing is released, which is what a synchronous standby promises).

>>> g = SyncGate(1)
>>> g.note(1, 10); g.note(2, 25); g.replicated
0
>>> g.ack("s1", 12); g.replicated
1
>>> g.ack("s1", 30); g.replicated
2
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["SyncGate"]


@cython.cclass
class SyncGate:
    # C fields when compiled (gate.pxd): the sender notes every batch and every acknowledgement
    # here, and reads ``replicated`` after each
    need: int
    replicated: int
    # the oldest batch waiting and its end offset (``_waiting``: there is one), then the later
    # ones: at depth 1 one batch waits at a time, noted and taken without a tuple or a deque call
    _waiting: bool
    _first: int
    _first_end: int
    _batches: deque[tuple[int, int]]
    _acks: dict[Hashable, int]
    _quorum: int

    members: frozenset[str] | None
    """In a ``--ha`` cluster, the standbys (by node name) that count: the cluster's sync set
    (``ha.syncset``). Then every one of them must hold a batch, and there must be ``need`` of
    them, so that any member may take over with every acknowledged change; ``name_of`` says
    which connected standby is which. None: any ``need`` of the connected standbys."""

    def __init__(self, need: int) -> None:
        if need < 1:
            raise ValueError("a gate needs at least one standby")
        self.need = need
        self.replicated = 0
        self._waiting = False
        self._first = self._first_end = 0
        self._batches = deque()
        self._acks = {}
        self._quorum = -1  # quorum() as of the last change of the acknowledgements or members
        self.members = None

    def note(self, batch: int, end_offset: int) -> None:
        """Batch ``batch`` was written; the log now ends at ``end_offset``."""
        # Once per batch (per job at depth 1): the quorum is kept, not recomputed, and a batch
        # behind one still waiting waits too (end offsets only grow).
        if self._waiting:
            self._batches.append((batch, end_offset))
        elif end_offset <= self._quorum:
            self.replicated = batch
        else:
            self._waiting = True
            self._first, self._first_end = batch, end_offset

    def ack(self, standby: Hashable, offset: int) -> None:
        """``standby`` holds every record below ``offset`` durable."""
        acks = self._acks
        prev = acks.get(standby)
        if prev is None or offset > cython.cast(cython.Py_ssize_t, prev):  # (compiled: C compare)
            acks[standby] = offset
            if self.need == 1 and self.members is None:
                # any one standby: the highest acknowledgement, and this one only rose
                q = self._quorum
                if offset > q:
                    q = self._quorum = offset
            else:
                q = self._quorum = self.quorum()
            # (_advance, without its call: once per acknowledgement)
            while self._waiting and self._first_end <= q:
                self._pass_first()

    def drop(self, standby: Hashable) -> None:
        """``standby`` disconnected: its acknowledgements no longer count."""
        self._acks.pop(standby, None)
        self._quorum = self.quorum()

    def name_of(self, standby: Hashable) -> str:
        return str(getattr(standby, "name", ""))

    def set_members(self, members: frozenset[str] | None) -> None:
        self.members = members
        self._quorum = self.quorum()
        self._advance()

    def quorum(self) -> int:
        """The offset ``need`` standbys hold durable (-1: fewer than ``need`` connected)."""
        members = self.members
        if members is not None:
            if len(members) < self.need:
                return -1
            held = {self.name_of(s): off for s, off in self._acks.items() if self.name_of(s) in members}
            return min(held.values()) if len(held) == len(members) else -1
        if len(self._acks) < self.need:
            return -1
        return sorted(self._acks.values(), reverse=True)[self.need - 1]

    def oldest_waiting(self) -> int | None:
        """The oldest written batch not yet held by ``need`` standbys (None: none waits)."""
        return self._first if self._waiting else None

    def _advance(self) -> None:
        q = self._quorum
        while self._waiting and self._first_end <= q:
            self._pass_first()

    def _pass_first(self) -> None:
        """The oldest waiting batch is replicated: the next one (if any) waits first."""
        self.replicated = self._first
        batches = self._batches
        if batches:
            self._first, self._first_end = batches.popleft()
        else:
            self._waiting = False
