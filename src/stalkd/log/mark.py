"""The high-water mark: how far the acknowledged log is known to reach, kept in ``MARK``.

Recovery alone cannot tell a log that ends because a crash interrupted a write from one whose
acknowledged end was damaged afterwards (zeroed, truncated, a byte flipped in its last frame,
its segments deleted): both end in zeros or a bad frame with nothing valid after it. The mark
tells them apart. It holds an offset every record below which was durable when it was written,
so after any crash the log reaches at least that far; a log that ends below it lost acknowledged
records and is refused by name (``stalkd log repair`` cuts it and lowers the mark).

It is written when the log opens, at each segment roll (the sealed segment's end), before
retention removes segments (after a snapshot), and by the log's marker thread at most every
``mark_interval`` seconds when the durable end moved: never by an append, so it costs no fsync
per write. Records acknowledged since the last mark are not covered: damage there still reads
as a torn tail.

The file holds two slots written alternately (as cursor files do), each a sequence number, the
offset and a CRC32C, so a torn write damages only the slot being written and reading picks the
intact slot with the higher sequence. Slot layout (little-endian)::

    4s magic "STMK" | u16 version (1) | u16 zero | u64 seq | u64 offset | u32 crc32c of the rest

Ensures: ``read_mark`` returns the offset of the newest completed ``Mark.write`` (None for no
file), or raises ``MarkError`` when the file exists but neither slot is intact; ``Mark.write``
returns once the offset is on disk; the value written never exceeds what the caller passes.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Callable

from stalkd.log.crc import crc32c

from .errors import LogError
from .fs import REAL, FileSystem, create_whole

__all__ = ["MARK_NAME", "Mark", "MarkError", "Marker", "read_mark"]

MARK_NAME = "MARK"
_SLOT = 64  # one slot per cache line: a torn write cannot reach the other
_MAGIC = b"STMK"
_VERSION = 1
_BODY = struct.Struct("<4sHHQQ")
_CRC = struct.Struct("<I")


class MarkError(LogError):
    """The mark file exists but neither of its slots can be read."""


def _encode(seq: int, offset: int) -> bytes:
    body = _BODY.pack(_MAGIC, _VERSION, 0, seq, offset)
    return (body + _CRC.pack(crc32c(body))).ljust(_SLOT, b"\0")


def _decode(buf: bytes) -> tuple[int, int] | None:
    """(seq, offset) of an intact slot, or None.

    >>> _decode(_encode(3, 120)), _decode(bytes(_SLOT))
    ((3, 120), None)
    """
    if len(buf) < _BODY.size + _CRC.size:
        return None
    magic, version, _, seq, offset = _BODY.unpack_from(buf, 0)
    if magic != _MAGIC or version != _VERSION:
        return None
    if _CRC.unpack_from(buf, _BODY.size)[0] != crc32c(buf[: _BODY.size]):
        return None
    return seq, offset


def _read_slots(path: str, fs: FileSystem) -> tuple[int, int] | None:
    """(seq, offset) of the newest intact slot; None without a file; MarkError if none is intact."""
    try:
        data = fs.read_file(path)
    except FileNotFoundError:
        return None
    slots = [s for s in (_decode(data[:_SLOT]), _decode(data[_SLOT : 2 * _SLOT])) if s is not None]
    if not slots:
        raise MarkError(
            f"{path}: the high-water mark is unreadable (both slots damaged), so how far the acknowledged "
            f"log reached is unknown. To accept the log as it is and write a new mark, run: "
            f"stalkd log repair {os.path.dirname(path)}   (or start the server with --repair)"
        )
    return max(slots)


def read_mark(root: str, fs: FileSystem = REAL, name: str = MARK_NAME) -> int | None:
    """The offset the acknowledged log of ``root`` reached at the last mark; None without one
    (``name``: another file of the same two-slot kind, e.g. the WAL's id ceiling).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> read_mark(d)
    >>> m = Mark(d); m.write(7); m.close(); read_mark(d)
    7
    """
    got = _read_slots(os.path.join(root, name), fs)
    return None if got is None else got[1]


class Mark:
    """The mark file of the log in ``root``, opened (created if missing) for writing: a u64
    made durable by each ``write`` (``name``: another value kept the same way in its own file).

    A missing file is created whole (both slots, under a temporary name, fsynced and renamed), so a
    crash while creating it leaves either no mark or an intact one. A damaged file is replaced the
    same way: only a repair or a writer that has just recovered the log opens one.
    """

    def __init__(self, root: str, fs: FileSystem = REAL, name: str = MARK_NAME) -> None:
        self.root = root
        self.path = os.path.join(root, name)
        self.fs = fs
        self._lock = threading.Lock()
        try:
            got = _read_slots(self.path, fs)
        except MarkError:
            got = None
            with contextlib.suppress(FileNotFoundError):
                fs.unlink(self.path)
        if got is None:
            self._create()
            got = (0, 0)
        self.seq, self.value = got
        self.fd = fs.open(self.path, os.O_RDWR)

    def _create(self) -> None:
        fs = self.fs

        def fill(fd: int) -> None:
            fs.pwrite_all(fd, _encode(0, 0) + _encode(0, 0), 0)
            fs.fdatasync(fd)

        create_whole(fs, self.path, fill)
        fs.fsync_dir(self.root)

    def write(self, offset: int) -> None:
        """Record ``offset`` (every record below it durable) on disk, lower or higher; thread-safe."""
        with self._lock:
            self._write_locked(offset)

    def advance(self, offset: int) -> bool:
        """``write(offset)`` if it raises the mark; whether it did."""
        if offset <= self.value:  # the common case (nothing new), without the lock
            return False
        with self._lock:
            if offset <= self.value:
                return False
            self._write_locked(offset)
        return True

    def _write_locked(self, offset: int) -> None:
        if self.fd < 0:
            raise LogError(f"{self.path}: closed")
        seq = self.seq + 1
        self.fs.pwrite_all(self.fd, _encode(seq, offset), (seq % 2) * _SLOT)
        self.fs.fdatasync(self.fd)
        self.seq, self.value = seq, offset

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


class Marker:
    """The thread that raises ``mark`` to ``durable()`` at most every ``interval`` seconds, and only
    when it moved (an idle log wakes, compares two integers, sleeps). A failed write is reported
    to ``on_error`` once per failure streak and retried at the next interval: the mark only ever
    understates the durable end, so a late one loses no record."""

    def __init__(self, mark: Mark, durable: Callable[[], int], interval: float,
                 on_error: Callable[[OSError], None]) -> None:  # fmt: skip
        self._mark = mark
        self._durable = durable
        self._interval = interval
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stalkd-log-mark", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self._interval):
            try:
                self._mark.advance(self._durable())
                failing = False
            except OSError as e:
                if not failing:
                    self._on_error(e)
                failing = True
            except LogError:  # the log closed or failed under us
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
