"""Recovery: what a writer finds in a log directory when it opens it.

Sealed segments are trusted through their footers (only the footer is read), so opening costs
one scan of the active segment whatever the log's size. ``repair=True`` verifies every frame
instead and cuts the log at the first bad one.

Ensures: the result describes a prefix of the directory's frames that is dense in offsets and
CRC-valid; without ``repair`` nothing is moved or removed except empty segments left by a crash
during a roll-over; with ``repair`` cut-off files are moved to ``dropped/``, never deleted.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from .errors import LogCorruptError
from .fs import REAL, FileSystem
from .reader import list_segments
from .segment import FOOTER_SIZE, HEADER_SIZE, ScanState, SegmentView, encode_footer, scan

__all__ = ["Recovered", "RepairReport", "recover", "DROPPED_DIR"]

DROPPED_DIR = "dropped"


@dataclass(frozen=True)
class RepairReport:
    """What ``Log.open(..., repair=True)`` cut: the log now ends at ``offset``.

    ``dropped_files`` were moved to ``<dir>/dropped/`` (a repair deletes nothing).

    >>> RepairReport("d/seg-00000000000000000000.log", 4160, 65, "bad frame", ()).offset
    65
    """

    path: str
    position: int
    offset: int
    reason: str
    dropped_files: tuple[str, ...]


@dataclass(frozen=True)
class Recovered:
    """The state to continue from: sealed (base, end, path) segments, the next offset, and the
    active segment as (path, base, data end position, epoch), or None to start a new segment."""

    sealed: tuple[tuple[int, int, str], ...]
    next_offset: int
    active: tuple[str, int, int, int] | None
    repair: RepairReport | None


def _scan_all(view: SegmentView) -> ScanState:
    st = ScanState(HEADER_SIZE, view.base)
    for _ in scan(view.mv, view.base, view.epoch, st, view.size):
        pass
    return st


def _verify(view: SegmentView) -> tuple[int, int] | None:
    """(position, offset) of the first bad frame of a sealed segment, or None."""
    try:
        for _ in view.frames(view.base):
            pass
    except LogCorruptError as e:
        return e.position, e.offset if e.offset is not None else view.base
    return None


def _write_footer(fs: FileSystem, path: str, base: int, end: int, data_end: int, epoch: int) -> None:
    fd = fs.open(path, os.O_RDWR)
    try:
        fs.pwrite_all(fd, encode_footer(base, end, data_end, epoch), os.fstat(fd).st_size - FOOTER_SIZE)
        fs.fdatasync(fd)
    finally:
        os.close(fd)


def _cut(
    fs: FileSystem,
    root: str, files: list[str], views: list[SegmentView], keep: int, cut_view: SegmentView | None,
    position: int, offset: int, reason: str,
) -> RepairReport:
    """Move files[keep:] to dropped/ (beyond the cut segment); erase the cut segment's footer."""
    dropped_dir = os.path.join(root, DROPPED_DIR)
    fs.makedirs(dropped_dir)
    moved = []
    for p in files[keep:]:
        for v in views:
            if v.path == p:
                v.close()
        target = os.path.join(dropped_dir, os.path.basename(p))
        fs.replace(p, target)
        moved.append(target)
    if cut_view is not None:
        fd = fs.open(cut_view.path, os.O_RDWR)
        try:
            fs.pwrite_all(fd, bytes(FOOTER_SIZE), cut_view.size - FOOTER_SIZE)
            fs.fdatasync(fd)
        finally:
            os.close(fd)
        cut_view.footer = None
    fs.fsync_dir(root)
    where = cut_view.path if cut_view is not None else (files[keep] if keep < len(files) else root)
    return RepairReport(where, position, offset, reason, tuple(moved))


def recover(root: str, repair: bool, fs: FileSystem = REAL) -> Recovered:
    """Inspect ``root`` (already locked by the caller) and decide where the writer continues."""
    for name in os.listdir(root):
        if name.startswith("seg-") and name.endswith(".log.tmp"):
            fs.unlink(os.path.join(root, name))  # a segment whose creation a crash interrupted
    segs = list_segments(root, archive=False)
    files = [p for _, p, _ in segs]
    views: list[SegmentView] = []
    report: RepairReport | None = None
    try:
        for i, (base, p, _) in enumerate(segs):
            try:
                views.append(SegmentView(p))
            except LogCorruptError as e:
                if not repair:
                    raise
                prev_end = views[-1].footer[0] if views and views[-1].footer else base
                report = _cut(fs, root, files, views, i, None, 0, prev_end, f"unreadable segment: {e}")
                break
        n = len(views)
        i = 0
        while i < n - 1:
            view, nxt = views[i], views[i + 1].base
            if view.footer is not None:
                bad = None
                if view.footer[0] != nxt:
                    if not repair:
                        raise LogCorruptError(
                            f"{view.path}: footer ends at offset {view.footer[0]} but the next segment "
                            f"starts at {nxt}; open with repair=True to cut the log there",
                            path=view.path, position=view.size - FOOTER_SIZE, offset=view.footer[0],
                        )
                    report = _cut(fs, root, files, views, i + 1, None, 0, view.footer[0], "gap in offsets")
                    n = i + 1
                    break
                if repair:
                    bad = _verify(view)
                if bad is not None:
                    report = _cut(fs, root, files, views, i + 1, view, bad[0], bad[1], "bad frame in sealed segment")
                    n = i + 1
                    break
                i += 1
                continue
            # No valid footer on a segment that is not the last: a crash while rolling over (the
            # next segment is created before this footer is written), or damage.
            st = _scan_all(view)
            later = views[i + 1 : n]
            if all(v.footer is None and _scan_all(v).offset == v.base for v in later):
                for v in later:
                    v.close()
                    fs.unlink(v.path)
                with contextlib.suppress(OSError):
                    fs.fsync_dir(root)
                n = i + 1
                break
            if st.offset == nxt and st.status == "end":
                _write_footer(fs, view.path, view.base, st.offset, st.pos, view.epoch)
                view.footer = (st.offset, st.pos)
                i += 1
                continue
            if not repair:
                raise LogCorruptError(
                    f"{view.path}: bad frame at byte {st.pos} (offset {st.offset}) in a sealed segment "
                    "without a valid footer; open with repair=True to cut the log there",
                    path=view.path, position=st.pos, offset=st.offset,
                )
            report = _cut(fs, root, files, views, i + 1, view, st.pos, st.offset, "bad frame in sealed segment")
            n = i + 1
            break
        views = views[:n]
        if not views:
            return Recovered((), report.offset if report else 0, None, report)
        sealed = [(v.base, v.footer[0], v.path) for v in views[:-1] if v.footer is not None]
        last = views[-1]
        if last.footer is not None:
            sealed.append((last.base, last.footer[0], last.path))
            return Recovered(tuple(sealed), last.footer[0], None, report)
        st = _scan_all(last)
        return Recovered(tuple(sealed), st.offset, (last.path, last.base, st.pos, last.epoch), report)
    finally:
        for v in views:
            v.close()
