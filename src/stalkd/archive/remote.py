"""Reading an archive back: its manifest (the index and the parts a reader needs), and shipped segments as in-memory segment views.

A shipped segment is a valid segment file (header, frames, footer), so once its bytes are in
memory the log's own checks read it: :class:`BufferSegment` is a ``SegmentView`` over bytes
instead of a file mapping, and :func:`stalkd.log.columns.segment_columns` scans it frame by
frame exactly as it scans a local segment.

Ensures: a segment is taken only if the published manifest names it, and only if its bytes
have the size and CRC the manifest recorded (else :class:`ArchiveCorruptError` naming the
object); a missing manifest is an error naming the URL, never an empty archive.

Example::

    >>> # store = Store.open("s3://bucket/prefix"); m = load_manifest(store)
    >>> # view = fetch_segment(store, m.segments[0]); next(segment_columns(view, 0, None, 8192))
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from stalkd.archive.manifest import (
    MANIFEST_NAME,
    Index,
    Manifest,
    ManifestError,
    Part,
    PartEntry,
    SegmentEntry,
)
from stalkd.archive.store import ObjectMissingError, Store
from stalkd.log.crc import crc32c
from stalkd.log.errors import LogCorruptError, NotALogError
from stalkd.log.segment import FOOTER_SIZE, HEADER_SIZE, SegmentView, decode_header

__all__ = ["ArchiveCorruptError", "BufferSegment", "fetch_segment", "load_index", "load_manifest", "load_part",
           "load_segments", "RANGE_BYTES"]

T = TypeVar("T")

RANGE_BYTES = 8 * 2**20  # one ranged GET at most: bounded requests, retried alone by the SDK


class ArchiveCorruptError(LogCorruptError):
    """An archived object whose size or CRC differs from what the manifest recorded."""


def _read_doc(store: Store, name: str, decode: Callable[[bytes, str], T], attempts: int = 6) -> T:
    """``decode`` of the object ``name``; NotALogError if there is no manifest at all.

    A read that raced the shipper replacing the object can come back cut short (see
    ``ManifestError.incomplete``): it is read again, a few times, before giving up.
    """
    for attempt in range(attempts):
        try:
            data = store.read(name)
        except ObjectMissingError as exc:
            if name == MANIFEST_NAME:
                raise NotALogError(f"{store.url}: no stalkd archive here (no {MANIFEST_NAME}; an archive is "
                                   "written by `stalkd serve --archive URL`)") from exc
            raise ArchiveCorruptError(f"{store.url}/{name}: missing, but {MANIFEST_NAME} names it",
                                      path=f"{store.url}/{name}", position=0, offset=None) from exc
        try:
            return decode(data, f"{store.url}/{name}")
        except ManifestError as exc:
            if not exc.incomplete or attempt == attempts - 1:
                raise
            time.sleep(0.02 * 2**attempt)  # the replacement in flight lands meanwhile
    raise AssertionError("unreachable")  # pragma: no cover


def load_index(store: Store) -> Index:
    """The archive's published index (``manifest.json``); NotALogError if ``store`` holds none."""
    return _read_doc(store, MANIFEST_NAME, Index.decode)


def load_part(store: Store, entry: PartEntry) -> tuple[SegmentEntry, ...]:
    """The segments the index entry ``entry`` promises: the part's first ``count`` (a part may
    hold more, written before a crash or ahead of the next index)."""
    segs = _read_doc(store, entry.name, Part.decode).segments
    where = f"{store.url}/{entry.name}"
    if len(segs) < entry.count or (entry.count and segs[entry.count - 1].end != entry.end):
        raise ArchiveCorruptError(f"{where}: lists {len(segs)} segments, the index promises {entry.count} "
                                  f"ending at offset {entry.end}", path=where, position=0, offset=entry.base)
    return segs[: entry.count]


def load_segments(store: Store, index: Index | None = None, *, t_lo: int | None = None,
                  t_hi: int | None = None, end_before: int | None = None) -> list[SegmentEntry]:  # fmt: skip
    """The shipped segments with frames in ``[t_lo, t_hi]`` (us) that start below ``end_before``
    (each None: no bound), reading only the parts that can hold them."""
    index = load_index(store) if index is None else index
    if index.inline is not None:
        segs: Iterable[SegmentEntry] = index.inline.segments
    else:
        segs = (s for p in index.parts_for(t_lo, t_hi, end_before) for s in load_part(store, p))
    return [s for s in segs
            if not ((t_lo is not None and s.max_us < t_lo) or (t_hi is not None and s.min_us > t_hi)
                    or (end_before is not None and s.base >= end_before))]  # fmt: skip


def load_manifest(store: Store) -> Manifest:
    """Everything the archive's published manifest names (index and every part)."""
    index = load_index(store)
    return Manifest(tuple(load_segments(store, index)), index.snapshots)


class BufferSegment(SegmentView):
    """A ``SegmentView`` over the bytes of a shipped segment (no file, no mapping)."""

    def __init__(self, data: bytes, path: str) -> None:  # noqa: D107 - no super(): nothing to map
        self.path = path
        self.archived = True
        self.size = len(data)
        if self.size < HEADER_SIZE + FOOTER_SIZE:
            raise LogCorruptError(f"{path}: {self.size} bytes is too short for a segment",
                                  path=path, position=0, offset=None)
        self._data = data
        self.mv = memoryview(data)
        self.base, _ = decode_header(self.mv, path)
        self.footer = self.read_footer()

    def close(self) -> None:
        with contextlib.suppress(BufferError):
            self.mv.release()


def fetch_segment(store: Store, entry: SegmentEntry) -> BufferSegment:
    """The shipped segment ``entry``, read with ranged GETs and checked against the manifest."""
    parts = []
    pos = 0
    while pos < entry.size:
        n = min(RANGE_BYTES, entry.size - pos)
        chunk = store.read_range(entry.name, pos, n)
        if len(chunk) != n:
            break
        parts.append(chunk)
        pos += n
    data = b"".join(parts)
    where = f"{store.url}/{entry.name}"
    if len(data) != entry.size or crc32c(data) != entry.crc32c:
        raise ArchiveCorruptError(f"{where}: {len(data)} bytes with CRC {crc32c(data):#010x}, but the "
                                  f"manifest records {entry.size} bytes with CRC {entry.crc32c:#010x}",
                                  path=where, position=0, offset=entry.base)
    view = BufferSegment(data, where)
    if view.base != entry.base or view.footer is None or view.footer[0] != entry.end:
        raise ArchiveCorruptError(f"{where}: holds offsets from {view.base} to "
                                  f"{view.footer[0] if view.footer else '?'}, the manifest says "
                                  f"{entry.base}..{entry.end}", path=where, position=0, offset=entry.base)
    return view
