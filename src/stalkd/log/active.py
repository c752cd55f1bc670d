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

from .errors import LogError, LogFullError
from .fs import FileSystem
from .segment import FOOTER_SIZE, HEADER_SIZE, encode_footer, encode_header, segment_name

__all__ = ["ActiveSegment", "create_segment", "write_footer"]


class ActiveSegment:
    """The segment being appended to (pwrite, or stores into a shared writable mapping).

    ``users``/``retired`` let a sync running in another thread keep the descriptor open while
    the writer seals the segment and moves on.
    """

    __slots__ = ("path", "fd", "base", "pos", "limit", "size", "epoch", "users", "retired", "mm", "mm_batches", "fs")

    def __init__(self, path: str, fd: int, base: int, pos: int, size: int, epoch: int, io: str, fs: FileSystem) -> None:
        self.path, self.fd, self.base, self.pos = path, fd, base, pos
        self.size = size
        self.limit = size - FOOTER_SIZE  # the footer's room is reserved from the start
        self.epoch = epoch
        self.users = 0
        self.retired = False
        self.fs = fs
        # The blocks are reserved (fallocate) before the mapping is written, so a store into it
        # cannot hit a full disk on ext4/xfs/tmpfs (copy-on-write file systems: use io="pwrite").
        self.mm = mmap.mmap(fd, size) if io != "pwrite" else None
        self.mm_batches = io == "mmap"

    def write(self, data: bytes, pos: int) -> None:
        """Write ``data`` at byte ``pos`` (pwrite unless io="mmap")."""
        if self.mm_batches and self.mm is not None:
            self.mm[pos : pos + len(data)] = data
            return
        self.fs.pwrite_all(self.fd, data, pos)

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
        os.close(self.fd)


def create_segment(root: str, base: int, size: int, epoch: int, io: str, fsync: bool, fs: FileSystem) -> ActiveSegment:
    """A new, fully allocated segment file with its header; LogFullError if there is no room.

    Built under a temporary name and renamed into place, so a crash mid-creation leaves no
    half-made segment (recovery deletes stray ``.tmp`` files).
    """
    path = os.path.join(root, segment_name(base))
    tmp = path + ".tmp"
    fd = fs.open(tmp, os.O_RDWR, create=True, truncate=True)
    try:
        fs.allocate(fd, 0, size)
        fs.pwrite_all(fd, encode_header(base, epoch, time.time_ns() // 1000), 0)
        if fsync:
            fs.fdatasync(fd)
        fs.replace(tmp, path)
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
        fs.fsync_dir(root)
    return ActiveSegment(path, fd, base, HEADER_SIZE, size, epoch, io, fs)


def write_footer(fs: FileSystem, fd: int, size: int, base: int, end: int, data_end: int, epoch: int) -> None:
    """Seal a segment: its footer in the last bytes of the file, fsynced."""
    fs.pwrite_all(fd, encode_footer(base, end, data_end, epoch), size - FOOTER_SIZE)
    fs.fdatasync(fd)
