"""A consumer group's lag and its limits: ``max_lag_items`` / ``max_lag_bytes`` with
``overflow="drop"`` (the group skips its oldest records, counted in ``dropped``) or
``overflow="refuse"`` (the log refuses appends with :class:`LogLagError`). Mixed into
:class:`ConsumerGroup`; the state it reads and moves is the group's.

Ensures: a drop moves the committed head forward only (never over an offset not yet appended)
and counts exactly the records it skipped that were not already acked.
"""

from __future__ import annotations

import heapq
import os
import threading
from typing import Literal

from .ackranges import AckedRanges
from .errors import LogLagError
from .frame import frame_size
from .groupapi import GroupLog
from .reader import ReadPos
from .segment import FOOTER_SIZE, HEADER_SIZE

__all__ = ["LagLimits"]


class LagLimits:
    """Lag and its limits (mixed into ``ConsumerGroup``, which sets these attributes)."""

    log: GroupLog
    name: str
    committed: int
    dropped: int
    max_lag_items: int | None
    max_lag_bytes: int | None
    overflow: Literal["drop", "refuse"]
    _lock: threading.RLock
    _acked: AckedRanges
    _redeliver: list[int]
    _commit_pos: tuple[int, int, int] | None
    _next_read: int
    _read_pos: ReadPos
    _dirty: bool

    def _note_commit_pos(self, last: int) -> None:
        raise NotImplementedError  # ConsumerGroup's

    @property
    def lag(self) -> int:
        """Records appended but not yet acked by this group."""
        return self.log.next_offset - self.committed - len(self._acked)

    @property
    def lag_bytes(self) -> int:
        """Bytes of log data (frames) between the committed head and the log's end; sealed
        segments between them count their full size."""
        return self._bytes_from(self.committed, self._commit_pos)

    def _bytes_from(self, offset: int, pos: tuple[int, int, int] | None) -> int:
        log = self.log
        if offset >= log.next_offset:
            return 0
        bounds = log.segment_bounds()
        act_base, act_pos = log.position_of_end()
        sealed = [s for s in bounds if s[0] != act_base]
        if pos is None:
            base = max([b for b, _, _ in sealed if b <= offset] + [act_base if act_base <= offset else 0])
            pos = (base, base, HEADER_SIZE)
        _, base, p = pos
        if base == act_base:
            return act_pos - p
        total = act_pos - HEADER_SIZE
        for b, _end, path in sealed:
            if b >= base:
                try:
                    size = os.stat(path).st_size - FOOTER_SIZE
                except FileNotFoundError:
                    continue
                total += size - (p if b == base else HEADER_SIZE)
        return total

    def check_refuse(self, n_items: int, n_bytes: int) -> None:
        """Called by the log before a write: LogLagError if this group would go over its limit."""
        lag = self.lag
        if self.max_lag_items is not None and lag + n_items > self.max_lag_items:
            raise LogLagError(
                f"{self.log.path}: group {self.name!r} is {lag} records behind (max_lag_items="
                f"{self.max_lag_items}); append of {n_items} refused: consume and ack, or seek the group"
            )
        if self.max_lag_bytes is not None:
            lb = self.lag_bytes
            if lb + n_bytes > self.max_lag_bytes:
                raise LogLagError(
                    f"{self.log.path}: group {self.name!r} is {lb} bytes behind (max_lag_bytes="
                    f"{self.max_lag_bytes}); append of {n_bytes} bytes refused: consume and ack, or seek"
                )

    def enforce_lag(self) -> None:
        """overflow="drop": skip the oldest records until the group is within its limits (the
        log calls it before retention)."""
        if self.overflow != "drop" or (self.max_lag_items is None and self.max_lag_bytes is None):
            return
        with self._lock:
            target = self.committed
            if self.max_lag_items is not None and self.lag > self.max_lag_items:
                target = max(target, self.log.next_offset - self.max_lag_items)
            lag_bytes = self.lag_bytes if self.max_lag_bytes is not None else 0
            if self.max_lag_bytes is not None and lag_bytes > self.max_lag_bytes:
                excess = lag_bytes - self.max_lag_bytes
                # Walk from where lag_bytes started counting (the checkpoint's position).
                cp = self._commit_pos
                if cp is not None:
                    start, rp = cp[0], ReadPos(cp[1], cp[0], cp[2])
                else:
                    start = max(b for b, _, _ in self.log.segment_bounds() if b <= self.committed)
                    rp = None
                for f in self.log.read(start, resume=rp):
                    if excess <= 0:
                        break
                    excess -= frame_size(len(f.payload))
                    if f.offset >= self.committed:
                        target = max(target, f.offset + 1)
            if target > self.committed:
                self.dropped += target - self.committed - self._acked.drop_below(target)
                target = self._acked.take_front(target)  # acks just past the drop join the head
                self._redeliver = [o for o in self._redeliver if o >= target]
                heapq.heapify(self._redeliver)
                self.committed = target
                self._note_commit_pos(target - 1)
                if self._next_read < target:
                    self._next_read = target
                    bounds = self.log.segment_bounds()
                    base = max(b for b, _, _ in bounds if b <= target)
                    self._read_pos = ReadPos(base, base, HEADER_SIZE)
                self._dirty = True
