"""Reading a log directory without the writer lock: the API the Spark source and tools use.

Ensures: frames come out in offset order, each exactly once, all CRC-checked; a reader sees a
frame only once it is wholly written (its CRC checks), and never the stale frames a torn tail left.
"Committed" here means written to the file (it survives the writer's crash); under ``always`` a
reader may see a frame a moment before the writer's fsync covers it. Consumers that must see only
fsynced records use a consumer group, which stops at the writer's durable offset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from .columns import FrameColumns, segment_columns
from .errors import LogError
from .frame import Frame
from .segment import HEADER_SIZE, ScanState, SegmentInfo, SegmentView, parse_segment_name

__all__ = ["FrameSpan", "LogReader", "ReadPos", "SegmentViews", "list_segments", "read_columns", "read_frames"]

ARCHIVE_DIR = "archive"
GROUPS_DIR = "groups"  # one ``<name>.cur`` cursor file per consumer group (``group.py``)


@cython.cclass
class ReadPos:
    """A resumable read position: the segment base, the next offset and its byte position."""

    # C fields when compiled (reader.pxd): a standby's stream reads and moves one per message
    base: int
    offset: int
    pos: int

    def __init__(self, base: int, offset: int, pos: int) -> None:
        self.base, self.offset, self.pos = base, offset, pos


@cython.cclass
class FrameSpan:
    """Where the frames after a read position lie (``stalkd.log.log.frames_span`` fills one):
    bytes ``start`` to ``end`` of ``mv``, the mapping of the segment based at ``base``, hold the
    whole frames up to offset ``stop``. The mapping is the log's: a holder drops it before
    retention may run (``mv = None``)."""

    # C fields when compiled (reader.pxd): a standby's stream fills and reads one per message,
    # where a tuple of four ints and a slice object were made and taken apart
    base: int
    start: int
    end: int
    stop: int
    mv: memoryview | None

    def __init__(self) -> None:
        self.base = self.start = self.end = self.stop = 0
        self.mv = None


def list_segments(path: str, archive: bool | Literal["only"] = True) -> list[tuple[int, str, bool]]:
    """(base, file path, archived) of the segment files under ``path``, sorted by base."""
    found: dict[int, tuple[int, str, bool]] = {}
    dirs: list[tuple[str, bool]] = []
    if archive != "only":
        dirs.append((path, False))
    if archive:
        dirs.append((os.path.join(path, ARCHIVE_DIR), True))
    for d, archived in dirs:
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for name in names:
            base = parse_segment_name(name)
            if base is not None and base not in found:
                found[base] = (base, os.path.join(d, name), archived)
    return [found[b] for b in sorted(found)]


ViewGetter = Callable[[int, str, bool], SegmentView]


@cython.cclass
class SegmentViews:
    """The open mappings of one reader's (or the writer's) segment files, by path: each file
    is mapped once, and unmapped when it is forgotten (retired) or the cache is closed."""

    _views: dict[str, SegmentView]  # a C field when compiled (reader.pxd): get is asked per message sent

    def __init__(self) -> None:
        self._views = {}

    def get(self, base: int, path: str, archived: bool) -> SegmentView:
        """The mapping of ``path`` (a :data:`ViewGetter`), opened on first use."""
        view = self._views.get(path)
        if view is None:
            view = SegmentView(path, archived)
            self._views[path] = view
        return view

    def forget(self, path: str) -> None:
        view = self._views.pop(path, None)
        if view is not None:
            view.close()

    def keep_only(self, live: set[str]) -> None:
        """Forget every mapping of a file not in ``live`` (retired meanwhile)."""
        for gone in [p for p in self._views if p not in live]:
            self.forget(gone)

    def close(self) -> None:
        for view in self._views.values():
            view.close()
        self._views.clear()


def read_frames(
    listing: Callable[[], list[tuple[int, str, bool]]],
    get_view: ViewGetter,
    start: int,
    end: int | None,
    resume: ReadPos | None = None,
    make: Callable[[int, int, memoryview], object] = Frame,
    segs: list[tuple[int, str, bool]] | None = None,
) -> Iterator[Frame]:
    """Frames with ``start <= offset < end`` across segments (an offset below the oldest kept
    segment starts at the oldest). ``resume`` is read as a position hint and updated as frames
    are yielded, so a consumer can continue without rescanning its segment. ``segs``: the
    segments as ``listing`` would give them, known already (``listing`` is still asked when one
    of them has gone meanwhile).
    """
    st = ScanState(HEADER_SIZE, 0)
    for offset, view in _segments_read(listing, get_view, start, end, segs, st):
        base = view.base
        hint = None
        if resume is not None and resume.base == base and resume.offset <= offset:
            hint = (resume.offset, resume.pos)
        for frame in view.frames(offset, end, hint, st, make):
            if resume is not None:
                resume.base, resume.offset, resume.pos = base, st.offset, st.pos
            yield frame


def read_columns(
    listing: Callable[[], list[tuple[int, str, bool]]],
    get_view: ViewGetter,
    start: int,
    end: int | None,
    max_rows: int,
    segs: list[tuple[int, str, bool]] | None = None,
) -> Iterator[FrameColumns]:
    """The frames ``read_frames`` yields (same bounds, checks and errors), as chunks of at most
    ``max_rows`` consecutive frames of one segment in columns (:mod:`stalkd.log.columns`): no
    Python object per frame, for readers of every record (recovery's WAL tail)."""
    st = ScanState(HEADER_SIZE, 0)
    for offset, view in _segments_read(listing, get_view, start, end, segs, st):
        yield from segment_columns(view, offset, end, max_rows, st)


def _segments_read(
    listing: Callable[[], list[tuple[int, str, bool]]],
    get_view: ViewGetter,
    start: int,
    end: int | None,
    segs: list[tuple[int, str, bool]] | None,
    st: ScanState,
) -> Iterator[tuple[int, SegmentView]]:
    """(first offset to read, view) of each segment a read from ``start`` to ``end`` crosses,
    in order; the caller scans each with ``st``, which says where that scan ended."""
    if segs is None:
        segs = listing()
    if not segs or (end is not None and start >= end):
        return
    idx = 0
    for i, (base, _, _) in enumerate(segs):
        if base <= start:
            idx = i
    offset = max(start, segs[0][0])
    for base, path, archived in segs[idx:]:
        if end is not None and base >= end:
            return
        try:
            view = get_view(base, path, archived)
        except FileNotFoundError:
            # Retention moved or removed it between the listing and now: look again.
            again = {b: (p, a) for b, p, a in listing()}
            if base not in again:
                continue
            view = get_view(base, *again[base])
        st.offset = base  # nothing read yet
        yield offset, view
        offset = max(offset, st.offset)
        if view.footer is None:
            view.footer = view.read_footer()  # sealed while we read it?
            if view.footer is None or st.offset < view.footer[0]:
                return  # the active segment: nothing valid lies past its scan end


class LogReader:
    """Read-only access to a log directory (live segments and, optionally, ``archive/``).

    Never takes the writer lock, so it works beside a live writer in another process.

    >>> import tempfile
    >>> from stalkd.log import Log
    >>> with Log.open(tempfile.mkdtemp(), durability="never") as log:
    ...     _ = log.append_many([b"a", b"b"])
    >>> with LogReader(log.path) as reader:
    ...     [(f.offset, f.bytes()) for f in reader.read(1)]
    [(1, b'b')]
    """

    def __init__(self, path: str | os.PathLike[str], *, archive: bool | Literal["only"] = True) -> None:
        self.path = os.fspath(path)
        if not os.path.isdir(self.path):
            raise LogError(f"{self.path}: not a log directory")
        self.archive = archive
        self._views = SegmentViews()
        self._view = self._views.get

    def segments(self) -> list[SegmentInfo]:
        """The segments, oldest first; ``end_offset`` is None for the active (unsealed) one."""
        out = []
        listing = list_segments(self.path, self.archive)
        self._views.keep_only({p for _, p, _ in listing})  # retired by retention meanwhile
        for base, path, archived in listing:
            view = self._view(base, path, archived)
            end = view.footer[0] if view.footer else None
            out.append(SegmentInfo(path, base, end, view.footer is not None, archived, view.size))
        return out

    def read(self, start: int = 0, end: int | None = None) -> Iterator[Frame]:
        """Frames from ``start`` (inclusive) to ``end`` (exclusive; None = all written so far)."""
        return read_frames(lambda: list_segments(self.path, self.archive), self._view, start, end)

    def read_segment(self, path: str, start: int | None = None, end: int | None = None) -> Iterator[Frame]:
        """Frames of one segment file (one Spark partition), optionally bounded by offsets."""
        view = self._view(0, path, os.path.basename(os.path.dirname(path)) == ARCHIVE_DIR)
        return view.frames(view.base if start is None else start, end)

    def read_segment_columns(
        self, path: str, start: int | None = None, end: int | None = None, max_rows: int = 8192
    ) -> Iterator[FrameColumns]:
        """The frames ``read_segment`` yields, as chunks of at most ``max_rows`` rows in columns.

        Same checks and bounds, without a Python object per frame (see :mod:`stalkd.log.columns`):
        each chunk gives ``offsets``, ``timestamps_us``, ``starts`` and ``ends`` into ``buf``.
        """
        view = self._view(0, path, os.path.basename(os.path.dirname(path)) == ARCHIVE_DIR)
        return segment_columns(view, view.base if start is None else start, end, max_rows)

    def close(self) -> None:
        """Drop the cached mappings."""
        self._views.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
