"""What recovery changes in a log directory, each change durable before the next: a footer a
crash left unwritten, bytes zeroed (a torn tail, a cut), bytes or whole segments moved aside
into ``dropped/`` (0600; a repair deletes nothing), and the :class:`RepairReport` of a cut,
with the records still readable in what was dropped. ``recovery`` decides where; every change
goes through the file-system seam (``fs``), where tests inject their faults.
"""

from __future__ import annotations

import os

from stalkd.values import Value

from .active import create_segment
from .errors import LogCorruptError
from .fs import FileSystem
from .segment import FOOTER_SIZE, HEADER_SIZE, SegmentView, encode_footer

__all__ = ["DROPPED_DIR", "ZEROS", "RepairReport", "write_footer", "zero", "dropped_dir", "free_name",
           "quarantine", "salvage_file", "cut", "restart_at"]

DROPPED_DIR = "dropped"
ZEROS = bytes(1 << 20)


class RepairReport(Value):
    """What a repair cut: the log now ends at ``offset``.

    ``dropped_files`` were moved to or written in ``<dir>/dropped/`` (a repair deletes nothing);
    ``salvaged`` holds (offset, payload) of the valid records found in what was dropped.

    >>> RepairReport("d/seg-00000000000000000000.log", 4160, 65, "bad frame", ()).offset
    65
    """

    __slots__ = ("path", "position", "offset", "reason", "dropped_files", "salvaged")
    path: str
    position: int
    offset: int
    reason: str
    dropped_files: tuple[str, ...]
    salvaged: tuple[tuple[int, bytes], ...]

    def __init__(self, path: str, position: int, offset: int, reason: str, dropped_files: tuple[str, ...],
                 salvaged: tuple[tuple[int, bytes], ...] = ()) -> None:  # fmt: skip
        self.path = path
        self.position = position
        self.offset = offset
        self.reason = reason
        self.dropped_files = dropped_files
        self.salvaged = salvaged


def write_footer(fs: FileSystem, path: str, base: int, end: int, data_end: int, epoch: int) -> None:
    """Seal a segment a crash left without its footer (its frames all valid), durably."""
    fd = fs.open(path, os.O_RDWR)
    try:
        fs.pwrite_all(fd, encode_footer(base, end, data_end, epoch), os.fstat(fd).st_size - FOOTER_SIZE)
        fs.fdatasync(fd)
    finally:
        os.close(fd)


def zero(fs: FileSystem, path: str, start: int, end: int) -> None:
    """Zero bytes ``[start, end)`` of a segment (what a cut drops), durably."""
    fd = fs.open(path, os.O_RDWR)
    try:
        end = min(end, os.fstat(fd).st_size)
        pos = start
        while pos < end:
            n = min(len(ZEROS), end - pos)
            fs.pwrite_all(fd, memoryview(ZEROS)[:n], pos)
            pos += n
        fs.fdatasync(fd)
    finally:
        os.close(fd)


def dropped_dir(fs: FileSystem, root: str) -> str:
    """``root/dropped/``, created if needed."""
    d = os.path.join(root, DROPPED_DIR)
    fs.makedirs(d)
    return d


def free_name(directory: str, name: str) -> str:
    """``directory/name``, or ``name.1``, ``name.2``... if taken: what an earlier repair put in
    dropped/ (or a standby in its quarantine) is never replaced, a repair deletes nothing."""
    target = os.path.join(directory, name)
    k = 1
    while os.path.lexists(target):
        target = os.path.join(directory, f"{name}.{k}")
        k += 1
    return target


def quarantine(fs: FileSystem, root: str, view: SegmentView, start: int, end: int) -> str:
    """Copy bytes ``[start, end)`` of a segment to a new 0600 file in dropped/; its path."""
    d = dropped_dir(fs, root)
    target = free_name(d, f"{os.path.basename(view.path)}.from-byte-{start}")
    fd = fs.open(target, os.O_WRONLY | os.O_EXCL, create=True)
    try:
        fs.write_all(fd, view.mv[start:end])
        fs.fsync(fd)
    finally:
        os.close(fd)
    fs.fsync_dir(d)
    return target


def salvage_file(path: str) -> list[tuple[int, bytes]]:
    """Valid records in a segment file moved aside by a repair (none if it is unreadable)."""
    try:
        v = SegmentView(path)
    except (LogCorruptError, OSError):
        return []
    try:
        return [(o, p) for o, _, p in v.find_frames(HEADER_SIZE, v.size, v.base)]
    finally:
        v.close()


def cut(
    fs: FileSystem, root: str, files: list[str], views: list[SegmentView], keep: int, cut_view: SegmentView | None,
    position: int, offset: int, reason: str,
) -> RepairReport:
    """Move files[keep:] to dropped/ (beyond the cut segment), durably in both directories; erase
    the cut segment's footer (the tail check that follows quarantines and zeroes the frames
    beyond the cut)."""
    into = dropped_dir(fs, root)
    moved = []
    for p in files[keep:]:
        for v in views:
            if v.path == p:
                v.close()
        target = free_name(into, os.path.basename(p))
        fs.replace(p, target)
        moved.append(target)
    # The new names first: a move between directories is durable once both are fsynced, and with
    # only the log's a power cut loses the files from both (the power-loss campaign found
    # dropped/ empty after a repair); this order keeps them at worst under both names.
    fs.fsync_dir(into)
    if cut_view is not None:
        zero(fs, cut_view.path, cut_view.size - FOOTER_SIZE, cut_view.size)
        cut_view.footer = None
    fs.fsync_dir(root)
    salvaged = [rec for p in moved for rec in salvage_file(p)]
    where = cut_view.path if cut_view is not None else (files[keep] if keep < len(files) else root)
    return RepairReport(where, position, offset, reason, tuple(moved), tuple(salvaged))


def restart_at(fs: FileSystem, root: str, files: list[str], base: int, size: int) -> tuple[str, ...]:
    """Move the log's segments (``files``, closed) to dropped/ and begin an empty log whose next
    record is at offset ``base``; the paths moved to.

    The repair of a log that ends below its snapshot (``base``, the snapshot's offset), whose
    state holds everything those segments had: what is written next takes the offsets after the
    snapshot's, as before the loss, never one that a standby, a consumer group or the archive
    already saw for another record."""
    into = dropped_dir(fs, root)
    moved = []
    for p in files:
        target = free_name(into, os.path.basename(p))
        fs.replace(p, target)
        moved.append(target)
    fs.fsync_dir(into)
    create_segment(root, base, size, 1, "pwrite", True, fs).close()  # its directory fsynced: the moves too
    return tuple(moved)
