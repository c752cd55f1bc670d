"""The active segment: the one file being appended to, and how a new one is made.

Ensures: a segment file exists under its final name only once it is fully allocated and carries
its header, so every segment a reader or recovery finds has its room reserved and a valid header.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import time
from collections.abc import Callable

from .errors import LogError, LogFullError
from .segment import FOOTER_SIZE, HEADER_SIZE, encode_footer, encode_header, segment_name

__all__ = ["ActiveSegment", "SPARES_DIR", "create_segment", "drop_spare", "fsync_dir", "make_spare", "spares"]

# Spare segments: whole preallocated files a new segment is renamed from, so the room a spare
# holds is never handed back to the file system (where another process could take it) on its
# way to becoming a segment. Who keeps how many is the caller's policy (engine/space.py).
SPARES_DIR = "spares"
_SPARE_PREFIX = "spare-"


def _allocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes of blocks for a new segment (the one place disk space is taken)."""
    os.posix_fallocate(fd, 0, size)


def fsync_dir(path: str) -> None:
    """Make a directory's entries (new, renamed or removed files) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ActiveSegment:
    """The segment being appended to (pwrite, or stores into a shared writable mapping).

    ``users``/``retired`` let a sync running in another thread keep the descriptor open while
    the writer seals the segment and moves on.
    """

    __slots__ = ("path", "fd", "base", "pos", "limit", "size", "epoch", "users", "retired", "mm", "mm_batches")

    def __init__(self, path: str, fd: int, base: int, pos: int, size: int, epoch: int, io: str) -> None:
        self.path, self.fd, self.base, self.pos = path, fd, base, pos
        self.size = size
        self.limit = size - FOOTER_SIZE  # the footer's room is reserved from the start
        self.epoch = epoch
        self.users = 0
        self.retired = False
        # The blocks are reserved (fallocate) before the mapping is written, so a store into it
        # cannot hit a full disk on ext4/xfs/tmpfs (copy-on-write file systems: use io="pwrite").
        self.mm = mmap.mmap(fd, size) if io != "pwrite" else None
        self.mm_batches = io == "mmap"

    def write(self, data: bytes, pos: int) -> None:
        """Write ``data`` at byte ``pos`` (pwrite unless io="mmap")."""
        if self.mm_batches and self.mm is not None:
            self.mm[pos : pos + len(data)] = data
            return
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, pos)
            view = view[n:]
            pos += n

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
        os.close(self.fd)


def spares(root: str, size: int) -> list[str]:
    """Paths of the spare segment files of exactly ``size`` bytes in ``root/spares``."""
    d = os.path.join(root, SPARES_DIR)
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        if n.startswith(_SPARE_PREFIX) and not n.endswith(".tmp"):
            p = os.path.join(d, n)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(p, follow_symlinks=False).st_size == size:
                    out.append(p)
    return out


def make_spare(root: str, size: int, allocate: Callable[[int, int, int], None] = os.posix_fallocate) -> str:
    """A new spare segment file of ``size`` preallocated bytes; OSError (ENOSPC) if no room,
    leaving nothing behind. ``allocate(fd, offset, size)`` is the file-system seam."""
    d = os.path.join(root, SPARES_DIR)
    os.makedirs(d, mode=0o700, exist_ok=True)
    k = len(os.listdir(d))
    while os.path.lexists(os.path.join(d, f"{_SPARE_PREFIX}{k:06d}")):
        k += 1
    final = os.path.join(d, f"{_SPARE_PREFIX}{k:06d}")
    tmp = final + ".tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        allocate(fd, 0, size)
        os.rename(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    return final


def drop_spare(root: str, size: int) -> bool:
    """Give one spare's room back to the file system; False if there was none."""
    for p in spares(root, size):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
            return True
    return False


def _take_spare(root: str, size: int, tmp: str) -> int | None:
    """Rename a spare of ``size`` bytes to ``tmp`` and open it, or None if there is none."""
    for p in spares(root, size):
        try:
            os.rename(p, tmp)
        except FileNotFoundError:
            continue
        return os.open(tmp, os.O_RDWR | os.O_NOFOLLOW)
    return None


def create_segment(root: str, base: int, size: int, epoch: int, io: str, fsync: bool) -> ActiveSegment:
    """A new, fully allocated segment file with its header; LogFullError if there is no room.

    Built under a temporary name and renamed into place, so a crash mid-creation leaves no
    half-made segment (recovery deletes stray ``.tmp`` files). A spare of the same size is
    used when there is one (its blocks are already this process's: no allocation can fail).

    >>> # seg = create_segment("/data/wal", 1000, 64 << 20, 1, "auto", fsync=True)
    """
    path = os.path.join(root, segment_name(base))
    tmp = path + ".tmp"
    spare = _take_spare(root, size, tmp)
    fd = spare if spare is not None else os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if spare is None:
            _allocate(fd, size)
        os.pwrite(fd, encode_header(base, epoch, time.time_ns() // 1000), 0)
        if fsync:
            os.fdatasync(fd)
        os.rename(tmp, path)
    except OSError as e:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise LogFullError(
                f"{root}: no space for a new {size}-byte segment at offset {base} ({e.strerror}); "
                "the append was refused, the log is intact; free space and retry"
            ) from e
        raise LogError(f"{path}: cannot create segment: {e}") from e
    if fsync:
        fsync_dir(root)
    return ActiveSegment(path, fd, base, HEADER_SIZE, size, epoch, io)


def write_footer(fd: int, size: int, base: int, end: int, data_end: int, epoch: int) -> None:
    """Seal a segment: its footer in the last bytes of the file, fsynced."""
    os.pwrite(fd, encode_footer(base, end, data_end, epoch), size - FOOTER_SIZE)
    os.fdatasync(fd)
