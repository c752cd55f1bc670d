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
from .fs import REAL, FileSystem, create_whole
from .segment import FOOTER_SIZE, HEADER_SIZE, encode_footer, encode_header, segment_name

__all__ = ["ActiveSegment", "SPARES_DIR", "create_segment", "drop_spare", "make_spare", "spares", "write_footer"]

# Spare segments: whole preallocated files a new segment is renamed from, so the room a spare
# holds is never handed back to the file system (where another process could take it) on its
# way to becoming a segment. Who keeps how many is the caller's policy (engine/space.py).
SPARES_DIR = "spares"
_SPARE_PREFIX = "spare-"

# How far ahead of the data zeros are written (``ActiveSegment.zero_ahead``, under ``always``).
# posix_fallocate leaves *unwritten* extents (ext4, xfs): the first write into one converts it,
# a metadata change, so the fdatasync after it must wait for a journal commit instead of just
# the data and a cache flush. Zeroing a stretch ahead in one write pays that conversion once per
# stretch instead of at every fdatasync that reaches a new block (beanstalkd writes zeros over its
# whole binlog file for the same reason). bench/floor_bench.py --durable measures both.
ZERO_AHEAD = 1 << 20
_ZEROS = memoryview(bytes(ZERO_AHEAD))


class ActiveSegment:
    """The segment being appended to (pwrite, or stores into a shared writable mapping).

    ``users``/``retired`` let a sync running in another thread keep the descriptor open while
    the writer seals the segment and moves on. With ``zero_ahead``, bytes past the data are
    zeroed in stretches of that size before data reaches them (``zeroed`` is where the written
    zeros end); what lies past the data is never log content, so this changes no byte a reader
    or recovery can tell apart.

    Compiled, an extension type whose attributes and ``write`` are C-level (active.pxd).
    """

    def __init__(
        self,
        path: str,
        fd: int,
        base: int,
        pos: int,
        size: int,
        epoch: int,
        io: str,
        fs: FileSystem,
        zero_ahead: int = 0,
    ) -> None:
        self.path, self.fd, self.base, self.pos = path, fd, base, pos
        self.size = size
        self.limit = size - FOOTER_SIZE  # the footer's room is reserved from the start
        self.epoch = epoch
        self.users = 0
        self.retired = False
        self.fs = fs
        self.zero_ahead = min(zero_ahead, ZERO_AHEAD)
        self.zeroed = pos
        # Where a frame stored straight into the mapping must end: the limit, or with
        # ``zero_ahead`` the zeros written so far (past them, zero_to first).
        self.room = min(pos, self.limit) if self.zero_ahead else self.limit
        # The blocks are reserved (fallocate) before the mapping is written, so a store into it
        # cannot hit a full disk on ext4/xfs/tmpfs (copy-on-write file systems: use io="pwrite").
        self.mm = mmap.mmap(fd, size) if io != "pwrite" else None
        self.mm_batches = io == "mmap"

    def zero_to(self, end: int) -> None:
        """Before data up to byte ``end`` is written: zero the next stretch past it if the
        zeros written so far end before ``end`` (a no-op without ``zero_ahead``)."""
        if end <= self.zeroed or not self.zero_ahead:
            return
        start = max(self.zeroed, end)
        stop = min(self.limit, (end + self.zero_ahead) & ~4095)  # whole pages: no partial page left
        if stop > start:
            self.fs.pwrite_all(self.fd, _ZEROS[: stop - start], start)
        self.zeroed = max(stop, end)
        self.room = min(self.zeroed, self.limit)

    def write(self, data: bytes | bytearray, pos: int) -> None:
        """Write ``data`` at byte ``pos`` (pwrite unless io="mmap")."""
        end = pos + len(data)
        if end > self.zeroed and self.zero_ahead:
            self.zero_to(end)
        if self.mm_batches and self.mm is not None:
            self.mm[pos : pos + len(data)] = data
            return
        self.fs.pwrite_all(self.fd, data, pos)

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


def make_spare(root: str, size: int, fs: FileSystem = REAL) -> str:
    """A new spare segment file of ``size`` preallocated bytes; OSError (ENOSPC) if no room,
    leaving nothing behind."""
    d = os.path.join(root, SPARES_DIR)
    fs.makedirs(d)
    k = len(os.listdir(d))
    while os.path.lexists(os.path.join(d, f"{_SPARE_PREFIX}{k:06d}")):
        k += 1
    final = os.path.join(d, f"{_SPARE_PREFIX}{k:06d}")
    create_whole(fs, final, lambda fd: fs.allocate(fd, 0, size))
    return final


def drop_spare(root: str, size: int, fs: FileSystem = REAL) -> bool:
    """Give one spare's room back to the file system; False if there was none."""
    for p in spares(root, size):
        with contextlib.suppress(FileNotFoundError):
            fs.unlink(p)
            return True
    return False


def _take_spare(root: str, size: int, tmp: str, fs: FileSystem) -> int | None:
    """Rename a spare of ``size`` bytes to ``tmp`` and open it, or None if there is none.

    The spare's removal from ``spares/`` is made durable (that directory fsynced, whatever the
    policy) before anything is written into the file: a rename between directories is durable
    only once both are fsynced, and with only the log's directory fsynced a power cut may leave
    the file under both names; the next start would then take the "spare" again and write a
    new segment's header over this segment (found by the power-loss campaign: the server then
    refused to start, "header says base offset ..., file name says ...")."""
    for p in spares(root, size):
        try:
            fs.replace(p, tmp)
        except FileNotFoundError:
            continue
        fs.fsync_dir(os.path.dirname(p))
        return fs.open(tmp, os.O_RDWR)
    return None


def create_segment(
    root: str, base: int, size: int, epoch: int, io: str, fsync: bool, fs: FileSystem, zero_ahead: int = 0,
    clock: Callable[[], int] = time.time_ns,
) -> ActiveSegment:
    """A new, fully allocated segment file with its header; LogFullError if there is no room.

    Built under a temporary name and renamed into place, so a crash mid-creation leaves no
    half-made segment (recovery deletes stray ``.tmp`` files). A spare of the same size is
    used when there is one (its blocks are already this process's: no allocation can fail).
    ``clock`` gives the header's creation time in nanoseconds (the writer's, see writer.py).

    The header and the reservation are fdatasynced before the rename whatever the policy
    (once a segment, as the footer is): ``fsync`` only adds the directory's fsync. Under
    ``never`` any later fsync of the directory (a compaction's, a new group's) makes the name
    durable; without its content a power cut then left an empty segment, refused as damage,
    and a server that would not start without a repair (found by the power-loss campaign).
    """
    path = os.path.join(root, segment_name(base))
    tmp = path + ".tmp"
    spare = _take_spare(root, size, tmp, fs)
    fd = spare if spare is not None else fs.open(tmp, os.O_RDWR, create=True, truncate=True)
    try:
        if spare is None:
            fs.allocate(fd, 0, size)
        fs.pwrite_all(fd, encode_header(base, epoch, clock() // 1000), 0)
        fs.fdatasync(fd)
        fs.replace(tmp, path)
    except OSError as e:
        os.close(fd)
        with contextlib.suppress(OSError):
            fs.unlink(tmp)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise LogFullError(
                f"{root}: no space for a new {size}-byte segment at offset {base} ({e.strerror}); "
                "the append was refused, the log is intact; free space and retry"
            ) from e
        raise LogError(f"{path}: cannot create segment: {e}") from e
    if fsync:
        fs.fsync_dir(root)
    return ActiveSegment(path, fd, base, HEADER_SIZE, size, epoch, io, fs, zero_ahead)


def write_footer(fs: FileSystem, fd: int, size: int, base: int, end: int, data_end: int, epoch: int) -> None:
    """Seal a segment: its footer in the last bytes of the file, fsynced."""
    fs.pwrite_all(fd, encode_footer(base, end, data_end, epoch), size - FOOTER_SIZE)
    fs.fdatasync(fd)
