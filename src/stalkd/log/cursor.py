"""Cursor files: a consumer group's committed position, crash-safe at any instant.

A cursor file holds two slots written alternately; each slot carries a sequence number and a
CRC32C. A torn write damages only the slot being written, so reading picks the valid slot with
the higher sequence: after a crash a group resumes at its last or second-to-last checkpoint, never
at garbage (at-least-once delivery).

Slots are 4 KiB (room for ``MAX_RANGES`` acked ranges). A checkpoint with more out-of-order acks
than that is written to a new file with slots twice as large (as often as needed), fsynced, then
renamed over the old one, so the slot size is half the file's length whenever that exceeds 8 KiB.
Files never shrink: a group that once had that many gaps will have them again.

Slot layout (little-endian)::

    4s magic "STCU" | u16 version (1) | u16 n_ranges | u64 seq | u64 committed
    | u64 pos_offset | u64 pos_base | u64 pos | u64 expired | u64 dropped
    | n_ranges x (u64 start, u64 end)   acked offsets above ``committed`` (end exclusive)
    | u32 crc32c of everything before it

A checkpoint of more than 65,535 ranges, which a u16 cannot count, is written as version 2: the
same fields with ``n_ranges`` 0, then ``u64 n_ranges``, then the ranges and the CRC. Fewer are
written as version 1 still, so a file stays readable by a build that knows only version 1 until
a group has that many gaps (such a build then finds no intact slot, and the group starts over
from the log's start: delivered again, never lost).

``(pos_offset, pos_base, pos)`` is a read hint: record ``pos_offset`` (at or below
``committed``) starts at byte ``pos`` of the segment with base ``pos_base``.

Ensures: ``read_cursor`` returns the state of some completed ``CursorFile.write`` call (the newest
whose slot is intact), or None for a missing or wholly unreadable file; every acked range of that
call is in it, however many there were.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import sys
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stalkd.log.crc import crc32c

from .fs import REAL, FileSystem

__all__ = ["CursorState", "read_cursor", "CursorFile", "CursorSyncer", "MAX_RANGES"]

SLOT_SIZE = 4096
_MAGIC = b"STCU"
_VERSION = 1
_HEAD = struct.Struct("<4sHHQQQQQQQ")
_COUNT = struct.Struct("<Q")  # version 2's n_ranges, after the head
_RANGE = struct.Struct("<QQ")
_U16_MAX = 0xFFFF
_U32 = struct.Struct("<I")
_GROW_SUFFIX = ".grow"
MAX_RANGES = (SLOT_SIZE - _HEAD.size - _U32.size) // _RANGE.size


@dataclass(frozen=True)
class CursorState:
    """A checkpoint: everything below ``committed`` is acked, plus the ``acked`` ranges above it.

    >>> CursorState(seq=1, committed=10, pos_offset=0, pos_base=0, pos=64, expired=0, dropped=0).committed
    10
    """

    seq: int
    committed: int
    pos_offset: int
    pos_base: int
    pos: int
    expired: int
    dropped: int
    acked: tuple[tuple[int, int], ...] = ()


def slot_size(file_size: int) -> int:
    """The slot size of a cursor file of ``file_size`` bytes (see the module docstring)."""
    return file_size // 2 if file_size > 2 * SLOT_SIZE else SLOT_SIZE


def _fitting_slot(needed: int) -> int:
    size = SLOT_SIZE
    while size < needed:
        size *= 2
    return size


def _flat(words: array[int]) -> array[int]:
    """``words`` as the slot's little-endian u64s (the ranges go in and out as one array: a
    struct call per range made a checkpoint of 65k ranges cost ~85 ms, with the GIL held)."""
    if sys.byteorder != "little":
        words.byteswap()
    return words


def encode_slot(state: CursorState, words: Sequence[array[int]] | None = None) -> bytes:
    """The slot of ``state``; ``words``, if given, are its acked ranges instead of
    ``state.acked`` (which must then be empty), already flat: arrays of ``start, end, start,
    end, ...`` one after the other (how a consumer group keeps them, so a checkpoint builds no
    tuple per range and copies the words once, into the slot)."""
    if words is None:
        words = [array("Q", itertools.chain.from_iterable(state.acked))]
    elif state.acked:
        raise ValueError("acked ranges given twice")
    n = sum(len(w) for w in words) // 2
    version = 1 if n <= _U16_MAX else 2
    head = _HEAD.pack(
        _MAGIC, version, n if version == 1 else 0, state.seq, state.committed, state.pos_offset, state.pos_base,
        state.pos, state.expired, state.dropped,
    )
    if version == 2:
        head += _COUNT.pack(n)
    if sys.byteorder != "little":
        words = [_flat(array("Q", w)) for w in words]  # swapped in copies: the caller's stay as they are
    crc = crc32c(head)
    for w in words:
        crc = crc32c(w, crc)
    # One copy of the ranges, into the slot itself (no body made first and copied again).
    return b"".join([head, *words, _U32.pack(crc)])


def decode_slot(buf: bytes) -> CursorState | None:
    if len(buf) < _HEAD.size + _U32.size:
        return None
    magic, version, n, seq, committed, pos_offset, pos_base, pos, expired, dropped = _HEAD.unpack_from(buf, 0)
    start = _HEAD.size
    if magic != _MAGIC:
        return None
    if version == 2:
        if n != 0 or start + _COUNT.size + _U32.size > len(buf):
            return None
        (n,) = _COUNT.unpack_from(buf, start)
        start += _COUNT.size
    elif version != _VERSION:
        return None
    end = start + n * _RANGE.size
    if end + _U32.size > len(buf):
        return None
    if _U32.unpack_from(buf, end)[0] != crc32c(buf[:end]):
        return None
    words = array("Q")
    words.frombytes(buf[start:end])
    words = _flat(words)
    acked = tuple(zip(words[0::2], words[1::2], strict=True))
    return CursorState(seq, committed, pos_offset, pos_base, pos, expired, dropped, acked)


def read_cursor(path: str, fs: FileSystem = REAL) -> CursorState | None:
    """The newest intact checkpoint in ``path``, or None."""
    try:
        data = fs.read_file(path)
    except FileNotFoundError:
        return None
    size = slot_size(len(data))
    slots = [decode_slot(data[i * size : (i + 1) * size]) for i in range(2)]
    valid = [s for s in slots if s is not None]
    return max(valid, key=lambda s: s.seq) if valid else None


class CursorFile:
    """Writes checkpoints to alternating slots of one file (kept open).

    Ensures: at most one slot holds a write not yet fsynced (callers check :attr:`pending`
    before writing without fsync), so a power loss can tear at most one slot.
    """

    def __init__(self, path: str, fs: FileSystem = REAL) -> None:
        self.path = path
        self.fs = fs
        with contextlib.suppress(FileNotFoundError):
            fs.unlink(path + _GROW_SUFFIX)  # a crash while growing left it; the old file stands
        self.fd = fs.open(path, os.O_RDWR, create=True)
        self.slot_size = slot_size(os.fstat(self.fd).st_size)
        self.written_seq = 0
        self.synced_seq = 0
        self.error: OSError | None = None
        # Growing swaps ``fd`` while a CursorSyncer thread may be about to fsync it.
        self._fd_lock = threading.Lock()

    @property
    def pending(self) -> bool:
        """A write is waiting for its fsync (by a :class:`CursorSyncer`)."""
        return self.synced_seq < self.written_seq

    def write(self, state: CursorState, fsync: bool, words: Sequence[array[int]] | None = None) -> None:
        """Write ``state`` into slot ``seq % 2``; with ``fsync`` it is on disk when this returns.
        ``words``: its acked ranges, flat (see :func:`encode_slot`)."""
        data = encode_slot(state, words)
        if len(data) > self.slot_size:
            self._grow(state, data)
            return
        self.fs.pwrite_all(self.fd, data, (state.seq % 2) * self.slot_size)
        self.written_seq = state.seq
        if fsync:
            self.fs.fdatasync(self.fd)
            self.synced_seq = state.seq

    def _grow(self, state: CursorState, data: bytes) -> None:
        """Replace the file by one whose slots fit ``data``; always durable on return, since the
        rename must not reach the disk before the new file's contents."""
        size = _fitting_slot(len(data))
        tmp = self.path + _GROW_SUFFIX
        fs = self.fs
        fd = fs.open(tmp, os.O_RDWR, create=True, truncate=True)
        try:
            os.ftruncate(fd, 2 * size)
            fs.pwrite_all(fd, data, (state.seq % 2) * size)
            fs.fsync(fd)
            fs.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                fs.unlink(tmp)
            raise
        fs.fsync_dir(os.path.dirname(self.path) or ".")
        with self._fd_lock:
            old, self.fd = self.fd, fd
            self.slot_size = size
            os.close(old)
        self.written_seq = self.synced_seq = state.seq

    def sync(self) -> None:
        seq = self.written_seq
        with self._fd_lock:
            self.fs.fdatasync(self.fd)
        self.synced_seq = seq

    def close(self) -> None:
        with self._fd_lock:
            os.close(self.fd)


class CursorSyncer:
    """A background thread for a log's groups: it fsyncs cursor files for ``every:<ms>`` groups,
    so acking never waits for the disk, and writes the checkpoints a group deferred (its
    interval not yet passed) once they are due, so an ack that no later call follows still
    reaches the file within the interval. Fsync requests are served as soon as they come (a
    busy consumer cannot starve them: the next system call the consumer makes hands over the
    GIL); only deferred checkpoints wait for their time.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[int, CursorFile] = {}
        # key -> (due on time.monotonic(), call): at most one deferred call per key (a group).
        self._timers: dict[object, tuple[float, Callable[[], None]]] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="stalkd-cursor-sync", daemon=True)
        self._thread.start()

    def request(self, f: CursorFile) -> None:
        with self._cond:
            self._pending[id(f)] = f
            self._cond.notify()

    def call_later(self, key: object, delay: float, fn: Callable[[], None]) -> None:
        """Call ``fn`` on this thread ``delay`` seconds from now (or, if ``key`` already has an
        earlier call due, then only). ``fn`` must not raise; it may call this again."""
        due = time.monotonic() + max(delay, 0.0)
        with self._cond:
            old = self._timers.get(key)
            if old is not None and old[0] <= due:
                return
            self._timers[key] = (due, fn)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._pending:
                        break
                    if self._closed:
                        return  # deferred checkpoints are moot: closing groups write their own
                    now = time.monotonic()
                    first = min((due for due, _ in self._timers.values()), default=None)
                    if first is not None and first <= now:
                        break
                    self._cond.wait(None if first is None else first - now)
                batch, self._pending = self._pending, {}
                now = time.monotonic()
                due_keys = [k for k, (due, _) in self._timers.items() if due <= now]
                calls = [self._timers.pop(k)[1] for k in due_keys]
            for f in batch.values():
                try:
                    f.sync()
                except OSError as e:
                    f.error = e
            for fn in calls:  # after the syncs: an every:<ms> checkpoint waiting for one may go now
                fn()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
