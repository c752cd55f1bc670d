"""The archive manifest: what a reader may take from an archive, so it plans without listing.

The manifest is sharded, so that publishing one more segment costs the same whether the
archive holds ten segments or ten million (a single document rewritten per segment would make
shipping quadratic), and a reader that wants one time range reads the few parts covering it:

- ``manifest.json`` at the archive root, the *index*: one entry per part (its offset and time
  range and how many segments it lists) and the shipped snapshots; replaced whole each time the
  shipper publishes (an object store PUT is atomic; elsewhere a rename);
- ``manifest/part-<first base>.json``, a *part*: up to ``part_size`` segment entries, in offset
  order. Only the last part grows (it is rewritten, bounded by ``part_size``); a full part is
  never written again.

A part is written before the index that counts its new entry, so a reader takes from a part
only the first ``count`` entries the index promises: an entry written by a shipper that
crashed before publishing the index is not part of the archive, and neither is any object left
half-written by a crash.

Format 2::

    manifest.json  {"format": 2, "part_size": N,
                    "parts": [{"name": "manifest/part-....json", "base": B, "end": E,
                               "min_us": T0, "max_us": T1, "count": K}, ...],
                    "snapshots": [{"name": "snapshots/snap-....snap", "size": N, "crc32c": C,
                                   "start": S}, ...]}
    part           {"format": 2,
                    "segments": [{"name": "segments/seg-....log", "base": B, "end": E,
                                  "min_us": T0, "max_us": T1, "size": N, "crc32c": C}, ...]}

Format 1 (read, never written) was one document: ``{"format": 1, "segments": [...],
"snapshots": [...]}``; it reads as an index whose one part is held inline.

``end`` is exclusive; ``min_us`` / ``max_us`` are the smallest and largest frame timestamps
(0 for a segment holding no frames), so a reader can skip segments (and whole parts) by time;
``crc32c`` covers the whole object.

How to change the format (numbered; append to it):
  1. Bump ``FORMAT`` for any change a reader of the previous format would misread; keep reading
     every older format here.
  2. Format 2 (sharded) replaced format 1 (one document).

Ensures: parts and their segments are sorted by ``base`` and never overlap;
``Index.decode(i.encode()) == i`` and ``Part.decode(p.encode()) == p``.

Example::

    >>> e = SegmentEntry("segments/seg-00000000000000000000.log", 0, 5, 1, 9, 128, 7)
    >>> index, part = Index(part_size=2).with_segment(Part(), e)
    >>> Index.decode(index.encode()) == index, index.end, part.segments == (e,)
    (True, 5, True)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

__all__ = ["Index", "Part", "PartEntry", "Manifest", "SegmentEntry", "SnapshotEntry", "ManifestError",
           "MANIFEST_NAME", "FORMAT", "PART_SIZE", "part_name"]

MANIFEST_NAME = "manifest.json"
FORMAT = 2
PART_SIZE = 1000  # segments per part: with 64 MiB segments a part covers ~64 GB of history


class ManifestError(ValueError):
    """A manifest that does not parse, or of a format this build does not know; names the problem.

    ``incomplete`` is True when the bytes are not a whole JSON document: what a read racing a
    replacement of the object can return (a size request, then a ranged GET of the new version).
    """

    def __init__(self, message: str, *, incomplete: bool = False) -> None:
        super().__init__(message)
        self.incomplete = incomplete


@dataclass(frozen=True)
class SegmentEntry:
    """One shipped segment: offsets ``[base, end)``, frame time range, object size and CRC."""

    name: str
    base: int
    end: int
    min_us: int
    max_us: int
    size: int
    crc32c: int


@dataclass(frozen=True)
class SnapshotEntry:
    """One shipped snapshot file; ``start`` the WAL offset it needs records from (None in
    format 1, which did not record it)."""

    name: str
    size: int
    crc32c: int
    start: int | None = None


@dataclass(frozen=True)
class PartEntry:
    """The index's entry for one part: its offset and time range and how many segments count."""

    name: str
    base: int
    end: int
    min_us: int
    max_us: int
    count: int


def part_name(base: int) -> str:
    """The object name of the part whose first segment starts at ``base``.

    >>> part_name(42)
    'manifest/part-00000000000000000042.json'
    """
    return f"manifest/part-{base:020d}.json"


def _load(data: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ManifestError(f"{where}: not a stalkd archive manifest ({exc})", incomplete=True) from exc
    if not isinstance(doc, dict) or "format" not in doc:
        raise ManifestError(f"{where}: not a stalkd archive manifest (no format)")
    if doc["format"] not in (1, FORMAT):
        raise ManifestError(f"{where}: manifest format {doc['format']} is not known to this build "
                            f"(knows 1 and {FORMAT})")  # fmt: skip
    return doc


def _segments(doc: dict[str, Any], where: str) -> tuple[SegmentEntry, ...]:
    try:
        segs = tuple(SegmentEntry(**s) for s in doc["segments"])
    except (KeyError, TypeError) as exc:
        raise ManifestError(f"{where}: bad entry ({exc})") from exc
    for a, b in zip(segs, segs[1:], strict=False):
        if b.base < a.end:
            raise ManifestError(f"{where}: segments {a.name} and {b.name} overlap")
    return segs


@dataclass(frozen=True)
class Part:
    """One part: segment entries in offset order (immutable; ``with_segment`` returns a new one)."""

    segments: tuple[SegmentEntry, ...] = ()

    def with_segment(self, entry: SegmentEntry) -> Part:
        if self.segments and entry.base < self.segments[-1].end:
            raise ManifestError(f"segment at {entry.base} overlaps the archive, which ends at "
                                f"{self.segments[-1].end}")  # fmt: skip
        return replace(self, segments=(*self.segments, entry))

    def encode(self) -> bytes:
        return json.dumps({"format": FORMAT, "segments": [asdict(s) for s in self.segments]},
                          separators=(",", ":")).encode()  # fmt: skip

    @classmethod
    def decode(cls, data: bytes, where: str = "manifest part") -> Part:
        return cls(_segments(_load(data, where), where))


@dataclass(frozen=True)
class Index:
    """The archive's index (``manifest.json``): its parts and snapshots. ``inline`` holds the
    segments of a format-1 manifest, read as one part kept in the index itself."""

    parts: tuple[PartEntry, ...] = ()
    snapshots: tuple[SnapshotEntry, ...] = ()
    part_size: int = PART_SIZE
    inline: Part | None = None

    @property
    def end(self) -> int:
        """The offset after the last shipped segment (0 for an empty archive)."""
        if self.inline is not None and self.inline.segments:
            return self.inline.segments[-1].end
        return self.parts[-1].end if self.parts else 0

    def with_segment(self, last: Part, entry: SegmentEntry) -> tuple[Index, Part]:
        """This index and its last part ``last`` (empty for a new archive) with ``entry`` added:
        the new index and the part to write (under ``part_name(part.segments[0].base)``) before
        the index. A full last part starts a new one."""
        if self.inline is not None:
            raise ManifestError("a format-1 manifest is converted (Index.from_v1) before it grows")
        if entry.base < self.end:
            raise ManifestError(f"segment at {entry.base} overlaps the archive, which ends at {self.end}")
        parts = self.parts
        if not parts or parts[-1].count >= self.part_size:
            last = Part()
            parts = (*parts, PartEntry(part_name(entry.base), entry.base, entry.end, entry.min_us,
                                       entry.max_us, 0))  # fmt: skip
        part = last.with_segment(entry)
        p = parts[-1]
        lo = entry.min_us if p.count == 0 else min(p.min_us, entry.min_us)
        grown = PartEntry(p.name, p.base, entry.end, lo, max(p.max_us, entry.max_us), p.count + 1)
        return replace(self, parts=(*parts[:-1], grown)), part

    def with_snapshot(self, entry: SnapshotEntry) -> Index:
        kept = tuple(s for s in self.snapshots if s.name != entry.name)
        return replace(self, snapshots=(*kept, entry))

    def without_snapshots(self, names: set[str]) -> Index:
        return replace(self, snapshots=tuple(s for s in self.snapshots if s.name not in names))

    def parts_for(self, t_lo: int | None = None, t_hi: int | None = None,
                  end_before: int | None = None) -> list[PartEntry]:  # fmt: skip
        """The parts that may hold segments with frames in ``[t_lo, t_hi]`` (us) starting below
        ``end_before`` (each None: no bound)."""
        return [p for p in self.parts
                if not ((t_lo is not None and p.max_us < t_lo) or (t_hi is not None and p.min_us > t_hi)
                        or (end_before is not None and p.base >= end_before))]  # fmt: skip

    @classmethod
    def from_v1(cls, segments: tuple[SegmentEntry, ...], snapshots: tuple[SnapshotEntry, ...],
                part_size: int = PART_SIZE) -> tuple[Index, list[tuple[str, Part]]]:  # fmt: skip
        """A format-2 index for a format-1 manifest's contents, and the parts to write first."""
        index, part = cls(snapshots=snapshots, part_size=part_size), Part()
        parts: dict[str, Part] = {}
        for s in segments:
            index, part = index.with_segment(part, s)
            parts[index.parts[-1].name] = part
        return index, list(parts.items())

    def encode(self) -> bytes:
        if self.inline is not None:
            raise ManifestError("a format-1 manifest is read, never written")
        doc = {"format": FORMAT, "part_size": self.part_size, "parts": [asdict(p) for p in self.parts],
               "snapshots": [asdict(s) for s in self.snapshots]}  # fmt: skip
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, where: str = "manifest") -> Index:
        doc = _load(data, where)
        try:
            snaps = tuple(SnapshotEntry(**s) for s in doc.get("snapshots", ()))
            if doc["format"] == 1:
                return cls(snapshots=snaps, inline=Part(_segments(doc, where)))
            parts = tuple(PartEntry(**p) for p in doc["parts"])
            part_size = int(doc["part_size"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{where}: bad entry ({exc})") from exc
        for a, b in zip(parts, parts[1:], strict=False):
            if b.base < a.end:
                raise ManifestError(f"{where}: parts {a.name} and {b.name} overlap")
        return cls(parts, snaps, part_size)


@dataclass(frozen=True)
class Manifest:
    """Everything an archive holds, read whole (``remote.load_manifest``): for tools and tests
    that want every segment; planners read the index and the parts they need."""

    segments: tuple[SegmentEntry, ...] = ()
    snapshots: tuple[SnapshotEntry, ...] = field(default=())

    @property
    def end(self) -> int:
        """The offset after the last shipped segment (0 for an empty archive)."""
        return self.segments[-1].end if self.segments else 0
