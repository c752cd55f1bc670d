"""The archive manifest: what a reader may take from an archive, so it plans without listing.

One JSON document, ``manifest.json`` at the archive root, replaced whole each time the shipper
publishes (an object store PUT is atomic; elsewhere a rename). An object becomes part of the
archive only when a published manifest names it, so an object left half-written by a crash is
never read as a segment.

Format 1::

    {"format": 1,
     "segments": [{"name": "segments/seg-....log", "base": B, "end": E,
                   "min_us": T0, "max_us": T1, "size": N, "crc32c": C}, ...],
     "snapshots": [{"name": "snapshots/snap-....snap", "size": N, "crc32c": C}, ...]}

``end`` is exclusive; ``min_us`` / ``max_us`` are the smallest and largest frame timestamps
(0 for a segment holding no frames), so a reader can skip segments by time; ``crc32c``
covers the whole object.

How to change the format (numbered; append to it):
  1. Bump ``FORMAT`` for any change a format-1 reader would misread; keep reading every older
     format here.

Ensures: segments are sorted by ``base`` and never overlap; ``decode(encode(m)) == m``.

Example::

    >>> m = Manifest().with_segment(SegmentEntry("segments/seg-00000000000000000000.log", 0, 5, 1, 9, 128, 7))
    >>> Manifest.decode(m.encode()) == m, m.end
    (True, 5)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

__all__ = ["Manifest", "SegmentEntry", "SnapshotEntry", "ManifestError", "MANIFEST_NAME", "FORMAT"]

MANIFEST_NAME = "manifest.json"
FORMAT = 1


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
    """One shipped snapshot file."""

    name: str
    size: int
    crc32c: int


@dataclass(frozen=True)
class Manifest:
    """The archive's contents (immutable; ``with_*`` return a new manifest)."""

    segments: tuple[SegmentEntry, ...] = ()
    snapshots: tuple[SnapshotEntry, ...] = field(default=())

    @property
    def end(self) -> int:
        """The offset after the last shipped segment (0 for an empty archive)."""
        return self.segments[-1].end if self.segments else 0

    def with_segment(self, entry: SegmentEntry) -> Manifest:
        if self.segments and entry.base < self.segments[-1].end:
            raise ManifestError(f"segment at {entry.base} overlaps the archive, which ends at {self.end}")
        return replace(self, segments=(*self.segments, entry))

    def with_snapshot(self, entry: SnapshotEntry) -> Manifest:
        kept = tuple(s for s in self.snapshots if s.name != entry.name)
        return replace(self, snapshots=(*kept, entry))

    def encode(self) -> bytes:
        doc = {"format": FORMAT, "segments": [asdict(s) for s in self.segments],
               "snapshots": [asdict(s) for s in self.snapshots]}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, where: str = "manifest") -> Manifest:
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise ManifestError(f"{where}: not a stalkd archive manifest ({exc})", incomplete=True) from exc
        try:
            fmt = doc["format"]
        except (KeyError, TypeError) as exc:
            raise ManifestError(f"{where}: not a stalkd archive manifest ({exc})") from exc
        if fmt != FORMAT:
            raise ManifestError(f"{where}: manifest format {fmt} is not known to this build (knows {FORMAT})")
        try:
            segs = tuple(SegmentEntry(**s) for s in doc["segments"])
            snaps = tuple(SnapshotEntry(**s) for s in doc.get("snapshots", ()))
        except (KeyError, TypeError) as exc:
            raise ManifestError(f"{where}: bad entry ({exc})") from exc
        for a, b in zip(segs, segs[1:], strict=False):
            if b.base < a.end:
                raise ManifestError(f"{where}: segments {a.name} and {b.name} overlap")
        return cls(segs, snaps)
