"""Consumer groups: named, independent, crash-safe cursors over one log (fan-out for free).

Delivery is at-least-once. A group remembers its committed head (every offset below it is
acked) plus the offsets acked out of order above it, so after a crash only unacked records come
back. ``nack`` puts one record back to be redelivered before any newer record, with an attempt
count. Per-group policies (libkestrel's): records older than ``ttl`` seconds are skipped and
counted as expired; past ``max_lag_items`` / ``max_lag_bytes`` the group either drops its oldest
records (``overflow="drop"``, counted) or the log refuses appends with :class:`LogLagError`
(``overflow="refuse"``). With ``max_attempts``, a record nacked that many times is moved to a
dead-letter log (another :class:`Log`, e.g. ``DIR/dead``) and acked here.

The log it reads is a :class:`GroupLog` (``groupapi.py``); lag and its limits are
``grouplag.py``. The offsets acked above the committed head are kept as ranges
(``ackranges.py``): a head stuck on one message costs memory by the gaps behind it, not by the
records acked since.

Checkpoints (the cursor file) follow the group's ``durability`` (the log's by default):
``always`` writes and fsyncs one before ``ack``/``nack`` returns; ``every:<ms>`` writes one at
most ``ms`` after an ack and fsyncs it in the background; ``never`` writes one (no fsync) at most
100 ms after an ack. A checkpoint not yet due when the ack returns is written by the next call
that finds it due, or else by the log's cursor thread when it falls due (so a consumer that
acks and then idles or blocks in ``poll`` loses nothing more). So after a process crash
(kill -9) only the acks of the last ``ms`` (``never``: 100 ms) may come back; after a power
loss under ``never``, any ack not checkpointed by an fsync may (at-least-once either way).

Ensures: ``committed`` only grows, except through ``seek``; a record is never delivered again
once acked (before or after a clean reopen; after a crash, within the window above), unless the
group is sought back over it; a record is delivered at most once between redeliveries, i.e.
polls never hand out an offset still in flight.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import os
import re
import threading
import time
from typing import Literal

from .ackranges import AckedRanges
from .commit import parse_durability
from .cursor import CursorFile, CursorState, read_cursor
from .errors import LogError
from .groupapi import GroupLog, Message
from .grouplag import LagLimits
from .reader import GROUPS_DIR, ReadPos
from .segment import HEADER_SIZE

__all__ = ["ConsumerGroup", "GroupLog", "Message", "GROUPS_DIR"]

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")

# The clock of the checkpoint interval (seconds); tests replace it to decide when one is due.
monotonic = time.monotonic

# Read hints a group keeps at most (one per poll; ``_add_hint``). Past it, the hints between the
# one at the committed head and the newest half are thinned to every other one, so a head stuck
# under a million polls keeps this many, not a million; the head moving into a thinned stretch
# finds its exact position by reading forward from the hint below it (``_note_commit_pos``).
HINTS_MAX = 1024


class ConsumerGroup(LagLimits):
    """One named cursor over a log; get it with :meth:`Log.group`.

    >>> import tempfile
    >>> from stalkd.log import Log
    >>> with Log.open(tempfile.mkdtemp(), durability="never") as log:
    ...     _ = log.append_many([b"a", b"b", b"c"])
    ...     g = log.group("mailer", ttl=3600, max_lag_items=100_000, overflow="drop")
    ...     msgs = g.poll(2)
    ...     g.ack(*msgs)
    ...     [m.bytes() for m in msgs], g.committed, g.lag
    ([b'a', b'b'], 2, 1)
    """

    def __init__(
        self,
        log: GroupLog,
        name: str,
        *,
        durability: str | None = None,
        ttl: float | None = None,
        max_lag_items: int | None = None,
        max_lag_bytes: int | None = None,
        overflow: Literal["drop", "refuse"] = "drop",
        max_attempts: int | None = None,
        dead_letter: GroupLog | None = None,
    ) -> None:
        if not _NAME.match(name):
            raise ValueError(f"group name {name!r}: use 1-100 of A-Z a-z 0-9 _ . -")
        self.log = log
        self.name = name
        self._lock = threading.RLock()
        self.configure(durability=durability, ttl=ttl, max_lag_items=max_lag_items,
                       max_lag_bytes=max_lag_bytes, overflow=overflow, max_attempts=max_attempts,
                       dead_letter=dead_letter)
        gdir = os.path.join(log.path, GROUPS_DIR)
        fs = log.fs
        fs.makedirs(gdir)
        path = os.path.join(gdir, name + ".cur")
        state = read_cursor(path, fs)
        existed = os.path.lexists(path)
        self._file = CursorFile(path, fs)
        if not existed:
            fs.fsync_dir(gdir)
        first = log.segment_bounds()[0][0]
        if state is None:
            state = CursorState(0, first, first, first, HEADER_SIZE, 0, 0, ())
        self._seq = state.seq
        # Clamped to the log's end: records a group acked may be gone after a power loss under
        # 'never'/'every', and their offsets will be reused by new records, which must be delivered.
        self.committed = min(max(state.committed, first), log.next_offset)
        # Acked above the head, as ranges: memory follows the gaps, not the offsets acked. Acks
        # past the log's end are void (those offsets will be new records), and a range starting
        # at a head clamped up to the log's first offset joins it.
        end = log.next_offset
        self._acked = AckedRanges((max(a, self.committed), min(b, end)) for a, b in state.acked)
        self.committed = self._acked.take_front(self.committed)
        # (offset, segment base, byte position) of a record at or below the committed head.
        self._commit_pos: tuple[int, int, int] | None = None
        if first <= state.pos_base <= state.pos_offset <= self.committed:
            self._commit_pos = (state.pos_offset, state.pos_base, state.pos)
        self.expired = state.expired
        self.dropped = state.dropped
        self._next_read = self.committed
        self._read_pos = ReadPos(*((state.pos_base, state.pos_offset, state.pos) if self._commit_pos else (first, first, HEADER_SIZE)))
        # Known record start positions (offset -> segment base, byte position), one per poll,
        # sorted by offset: redeliveries, lag_bytes and the checkpoint's read hint start from
        # the nearest one instead of a segment's first frame.
        self._hint_offs: list[int] = []
        self._hint_pos: list[tuple[int, int]] = []
        self._sparse_below = -1  # hints below this offset were thinned (HINTS_MAX)
        if self._commit_pos is not None:
            self._add_hint(self._commit_pos[0], self._commit_pos[1], self._commit_pos[2])
        self._redeliver: list[int] = []
        self._attempts: dict[int, int] = {}
        self._dirty = False
        self._last_persist = monotonic()
        self._deferred = False  # a call of _write_due is scheduled on the log's cursor thread
        self._closed = False

    def configure(
        self,
        *,
        durability: str | None = None,
        ttl: float | None = None,
        max_lag_items: int | None = None,
        max_lag_bytes: int | None = None,
        overflow: Literal["drop", "refuse"] = "drop",
        max_attempts: int | None = None,
        dead_letter: GroupLog | None = None,
    ) -> None:
        """Set the group's policies (see the module docstring)."""
        if overflow not in ("drop", "refuse"):
            raise ValueError(f"overflow must be 'drop' or 'refuse', not {overflow!r}")
        self.durability = durability if durability is not None else self.log.durability
        self._policy, self._interval = parse_durability(self.durability)
        if self._policy == "never":
            self._interval = 0.1  # checkpoint without fsync, at most 100 ms after an ack
        self.ttl = ttl
        self.max_lag_items = max_lag_items
        self.max_lag_bytes = max_lag_bytes
        self.overflow = overflow
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {max_attempts}")
        self.max_attempts = max_attempts
        self.dead_letter = dead_letter
        self.dead_lettered = 0

    # ------------------------------------------------------------------ consuming

    def poll(self, max_batch: int = 100, timeout: float = 0.0, *, now: float | None = None) -> list[Message]:
        """Up to ``max_batch`` messages: redeliveries first, then new records in offset order.

        Blocks up to ``timeout`` seconds for a new record when none is ready (woken by appends).
        ``now`` (seconds since the epoch, default the wall clock) decides TTL expiry.
        """
        with self._lock:
            out = self._take(max_batch, now)
            if out or timeout <= 0:
                return out
        if self.log.wait_visible(self._next_read, timeout):
            with self._lock:
                return self._take(max_batch, now)
        return []

    async def poll_async(self, max_batch: int = 100, timeout: float = 0.0, *, now: float | None = None) -> list[Message]:
        """:meth:`poll` for asyncio: waits for appends without blocking the event loop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            with self._lock:
                out = self._take(max_batch, now)
            left = deadline - loop.time()
            if out or left <= 0:
                return out
            if self._redeliver:  # nacked meanwhile: take them after one turn of the loop
                await asyncio.sleep(0)
                continue
            fut = self.log.future_visible(self._next_read)
            try:
                await asyncio.wait_for(fut, left)
            except TimeoutError:
                return []

    def _take(self, max_batch: int, now: float | None) -> list[Message]:
        self.enforce_lag()
        out: list[Message] = []
        while self._redeliver and len(out) < max_batch:
            off = heapq.heappop(self._redeliver)
            if off < self.committed or off in self._acked:
                continue
            for f in self.log.read(off, off + 1, resume=self._resume_for(off)):
                out.append(Message(f.offset, f.timestamp_us, f.payload, self._attempts.get(off, 0) + 1))
        end = self.log.visible_end()
        if len(out) >= max_batch or self._next_read >= end:
            return out
        rp = self._read_pos
        if self.ttl is None and not self._acked:
            # Offsets are dense: the next k records are exactly the offsets up to next + k, and
            # a bounded read checks no frame it will not hand out.
            out.extend(self.log.read(self._next_read, min(end, self._next_read + max_batch - len(out)),
                                     resume=rp, make=Message))  # fmt: skip
        else:
            frames = self.log.read(self._next_read, end, resume=rp, make=Message)
            ttl_us = None if self.ttl is None else int(self.ttl * 1e6)
            now_us = int((time.time() if now is None else now) * 1e6)
            for m in frames:
                off = m.offset
                if off in self._acked:
                    continue  # acked out of order before a restart
                if ttl_us is not None and now_us - m.timestamp_us > ttl_us:
                    self.expired += 1
                    self._next_read = off + 1
                    self._ack_one(off)
                    continue
                out.append(m)
                if len(out) >= max_batch:
                    break
        if rp.offset > self._next_read:
            self._next_read = rp.offset
            self._add_hint(rp.offset, rp.base, rp.pos)
        if self._dirty:
            self._maybe_persist()
        return out

    def ack(self, *messages: Message | int) -> None:
        """Mark messages (or offsets) done; the committed head advances past contiguous acks."""
        if not messages:
            return
        with self._lock:
            offs = [m if isinstance(m, int) else m.offset for m in messages]
            first, last = offs[0], offs[-1]
            if (first == self.committed and last < self._next_read and not self._acked and not self._attempts
                    and last - first == len(offs) - 1 and offs == list(range(first, last + 1))):
                # In-order acks of what was just polled: the common case, without per-offset work.
                self.committed = last + 1
                self._note_commit_pos(last)
                self._dirty = True
            elif (first > self.committed and last < self._next_read and len(offs) > 1
                    and last - first == len(offs) - 1 and offs == list(range(first, last + 1))):
                # A run of what was polled, above a head still out (slow, or a message retried):
                # one range, whatever its length.
                if self._attempts:
                    for off in offs:
                        self._attempts.pop(off, None)
                held = len(self._acked)
                self._acked.add_range(first, last + 1)
                if len(self._acked) != held:
                    self._dirty = True
            else:
                for off in offs:
                    if off >= self._next_read and off not in self._redeliver:
                        raise LogError(f"group {self.name!r}: offset {off} was never delivered (next is {self._next_read})")
                for off in offs:
                    self._ack_one(off)
            self._maybe_persist()

    def _add_hint(self, offset: int, base: int, pos: int) -> None:
        offs = self._hint_offs
        if offs and offs[-1] >= offset:
            return
        if len(offs) > HINTS_MAX // 2:  # keep the nearest hint at or below the committed head
            keep = max(0, bisect.bisect_right(offs, self.committed) - 1)
            del offs[:keep], self._hint_pos[:keep]
        if len(offs) >= HINTS_MAX:
            # A stuck head: thin the middle (the head's hint and the newest half stay), so the
            # hints stay within HINTS_MAX; their spacing there doubles at each thinning.
            newest = len(offs) - HINTS_MAX // 2
            keep_idx = [0, *range(2, newest, 2), *range(newest, len(offs))]
            self._hint_offs = offs = [offs[i] for i in keep_idx]
            self._hint_pos = [self._hint_pos[i] for i in keep_idx]
            self._sparse_below = max(self._sparse_below, offs[len(offs) - HINTS_MAX // 2])
        offs.append(offset)
        self._hint_pos.append((base, pos))

    def _resume_for(self, offset: int) -> ReadPos | None:
        """A read position at or before ``offset`` (None: scan its segment from the start)."""
        i = bisect.bisect_right(self._hint_offs, offset) - 1
        if i < 0:
            return None
        base, pos = self._hint_pos[i]
        return ReadPos(base, self._hint_offs[i], pos)

    def _note_commit_pos(self, last: int) -> None:
        rp = self._resume_for(last + 1)
        if rp is None:
            return
        if rp.offset <= last < self._sparse_below:
            # A thinned stretch: read forward to the head's own position (bounded by the
            # stretch), and keep it as a hint, so the next move of the head starts there. (A
            # read that fails leaves the hint below: lag_bytes then counts from it, the ack
            # stands.)
            at = ReadPos(rp.base, rp.offset, rp.pos)
            try:
                for _ in self.log.read(at.offset, last + 1, resume=at):
                    pass
            except LogError:
                at = rp
            rp = at
            if rp.offset == last + 1:
                # The head's own position replaces the hints below it: nothing below the head
                # is read again (redeliveries are of offsets at or above it), and so a run of
                # acks without a poll in between adds no hints.
                i = bisect.bisect_left(self._hint_offs, rp.offset)
                del self._hint_offs[:i], self._hint_pos[:i]
                if not self._hint_offs or self._hint_offs[0] != rp.offset:
                    self._hint_offs.insert(0, rp.offset)
                    self._hint_pos.insert(0, (rp.base, rp.pos))
        self._commit_pos = (rp.offset, rp.base, rp.pos)  # at or below the head: exact at poll ends

    def _ack_one(self, off: int) -> None:
        if off < self.committed:
            return
        if off != self.committed:
            if self._acked.add(off):  # False: acked already
                self._attempts.pop(off, None)
                self._dirty = True
            return
        # Every acked offset is above the head, so off is new; the ranges it meets join the head.
        self._attempts.pop(off, None)
        self._dirty = True
        c = self._acked.take_front(off + 1)
        self.committed = c
        if self._next_read < c:  # acks from before a reopen joined the head past what was read
            self._next_read = c
        self._note_commit_pos(c - 1)

    def nack(self, *messages: Message | int) -> None:
        """Give messages back: each is redelivered before newer records, with ``attempts`` + 1.

        With ``max_attempts``, a message nacked for the ``max_attempts``-th time is acked here
        instead, after its payload is appended to the ``dead_letter`` log (if one is given), and
        counted in :attr:`dead_lettered`.
        """
        with self._lock:
            for m in messages:
                off = m if isinstance(m, int) else m.offset
                if off < self.committed or off in self._acked:
                    continue
                if off >= self._next_read:
                    raise LogError(f"group {self.name!r}: offset {off} was never delivered (next is {self._next_read})")
                failures = self._attempts.get(off, 0) + 1
                if self.max_attempts is not None and failures >= self.max_attempts:
                    # Dead letter: out of this group's way, kept (copied) in the dead-letter log.
                    if self.dead_letter is not None:
                        for f in self.log.read(off, off + 1, resume=self._resume_for(off)):
                            self.dead_letter.append(f.payload)
                    self.dead_lettered += 1
                    self._ack_one(off)
                    continue
                self._attempts[off] = failures
                heapq.heappush(self._redeliver, off)
            self._maybe_persist()

    def seek(self, offset: int) -> None:
        """Move the cursor: everything below ``offset`` counts as acked, everything from it is unread.

        Offsets are clamped to what the log still holds (retention) and to its end.
        """
        with self._lock:
            bounds = self.log.segment_bounds()
            offset = max(bounds[0][0], min(offset, self.log.next_offset))
            self.committed = self._next_read = offset
            self._acked.clear()
            self._hint_offs.clear()
            self._hint_pos.clear()
            self._sparse_below = -1
            self._redeliver.clear()
            self._attempts.clear()
            self._commit_pos = None
            base = max(b for b, _, _ in bounds if b <= offset)
            self._read_pos = ReadPos(base, base, HEADER_SIZE)
            self._dirty = True
            self._persist(fsync=self._policy != "never")

    # ------------------------------------------------------------------ persistence

    def _maybe_persist(self) -> None:
        if not self._dirty:
            return
        f = self._file
        if f.error is not None:
            raise LogError(f"{f.path}: writing or fsyncing the cursor of group {self.name!r} failed: {f.error}")
        if self._policy == "always":
            self._persist(fsync=True)
            return
        wait = self._interval - (monotonic() - self._last_persist)
        # every: at most one slot unsynced at a time, so a power loss tears at most one; the
        # cursor thread runs the deferred write after the fsync it is doing. (never fsyncs
        # nothing: its slots are all "unsynced", and a power loss may lose any of them anyway.)
        unsynced = self._policy == "every" and f.pending
        if wait > 0 or unsynced:
            if not self._deferred:
                self._deferred = True
                syncer = self.log.cursor_syncer()
                if unsynced:  # make sure the fsync it waits for comes (a write under never has none)
                    syncer.request(f)
                syncer.call_later(self, wait, self._write_due)
            return
        self._persist(fsync=False)
        if self._policy == "every":
            self.log.cursor_syncer().request(f)

    def _write_due(self) -> None:
        """On the log's cursor thread: write the checkpoint an ack deferred, if still needed."""
        with self._lock:
            self._deferred = False
            if self._closed:
                return
            try:
                self._maybe_persist()  # not due yet (the clock, or an fsync in flight): again later
            except LogError:
                pass  # the file's error: the group's next ack, nack or poll raises it
            except OSError as e:
                self._file.error = e

    def _persist(self, fsync: bool) -> None:
        self._seq += 1
        pos_offset, base, pos = self._commit_pos if self._commit_pos is not None else (0, 0, 0)
        state = CursorState(self._seq, self.committed, pos_offset, base, pos, self.expired, self.dropped)
        # The ranges go to the slot as the words they are kept in: no tuple per range.
        self._file.write(state, fsync, self._acked.chunks())
        self._dirty = False
        self._last_persist = monotonic()

    def commit(self) -> None:
        """Checkpoint now, with an fsync (whatever the group's durability policy)."""
        with self._lock:
            self._persist(fsync=True)

    def close(self) -> None:
        """Checkpoint if needed and close the cursor file (the log calls it when it closes)."""
        with self._lock:
            if self._dirty:
                self._persist(fsync=self._policy != "never")
            self._closed = True
            self._file.close()

    def abandon(self) -> None:
        """Close the cursor file without a checkpoint (what a crash leaves; the log calls it)."""
        with self._lock:  # not while the cursor thread writes a deferred checkpoint to it
            self._closed = True
            self._file.close()

    def destroy(self) -> None:
        """Close and delete the cursor file (the log calls it to remove the group)."""
        fs = self.log.fs
        with self._lock:
            self._closed = True
            self._file.close()
        fs.unlink(self._file.path)
        fs.fsync_dir(os.path.dirname(self._file.path))

    def __repr__(self) -> str:
        return f"ConsumerGroup({self.name!r}, committed={self.committed}, lag={self.lag})"
