"""``stalkd log inspect URL [--verify]``: an archive's report, in the shape of a log's.

The manifest is read whole (the index and every part), so a part the index names but the store
lost, a part listing fewer segments than the index promises, or a gap between segments is
reported. ``--verify`` also fetches every segment and snapshot the manifest names and checks its
size and CRC against the manifest and every frame's CRC (the same checks a local sealed segment
gets), and that each segment holds the offsets the manifest says.

Ensures: read-only (nothing is written to the store); every problem is a row in
``report["corrupt"]`` naming the object, never an exception, except for a URL that holds no
archive (NotALogError) or a store that cannot be reached (StoreError).
"""

from __future__ import annotations

import os
from typing import Any

from stalkd.archive.manifest import MANIFEST_NAME, ManifestError, SegmentEntry
from stalkd.archive.remote import ArchiveCorruptError, fetch_segment, load_index, load_part
from stalkd.archive.store import Store, StoreError, is_url
from stalkd.log.columns import segment_columns
from stalkd.log.crc import crc32c
from stalkd.log.errors import LogCorruptError

__all__ = ["inspect_archive", "looks_like_archive"]

def looks_like_archive(path: str) -> bool:
    """An archive URL, or a local directory holding an archive manifest.

    >>> looks_like_archive("s3://bucket/q"), looks_like_archive("/nonexistent/wal")
    (True, False)
    """
    return is_url(path) or os.path.isfile(os.path.join(path, MANIFEST_NAME))


def _bad(where: str, error: str, offset: int | None = None) -> dict[str, Any]:
    return {"path": where, "position": 0, "offset": offset, "error": error}


def inspect_archive(url: str, verify: bool = False) -> dict[str, Any]:
    """A report of the archive at ``url`` as plain data (see the module docstring)."""
    store = Store.open(url)
    index = load_index(store)
    report: dict[str, Any] = {"path": url, "writer": "archive (written by stalkd serve --archive)",
                              "segments": [], "groups": [], "corrupt": [],
                              "parts": len(index.parts) if index.inline is None else 0,
                              "snapshots": [s.name for s in index.snapshots]}  # fmt: skip
    segs = []
    if index.inline is not None:
        segs = list(index.inline.segments)
    for p in index.parts:
        try:
            segs += load_part(store, p)
        except (ArchiveCorruptError, ManifestError) as exc:
            report["corrupt"].append(_bad(f"{url}/{p.name}", str(exc), p.base))
    prev_end: int | None = None
    for seg in segs:
        where = f"{url}/{seg.name}"
        if prev_end is not None and seg.base != prev_end:
            report["corrupt"].append(_bad(where, f"gap: offsets {prev_end}..{seg.base - 1} are not in the "
                                                 "archive (deleted before they were shipped)", prev_end))  # fmt: skip
        prev_end = seg.end
        row: dict[str, Any] = {"file": seg.name, "base": seg.base, "end": seg.end, "sealed": True,
                               "archived": True, "size": seg.size, "frames": seg.end - seg.base}  # fmt: skip
        if verify:
            row["frames"] = _verify_segment(store, seg, report["corrupt"])
        report["segments"].append(row)
    if verify:
        for s in index.snapshots:
            try:
                data = store.read(s.name)
            except StoreError as exc:
                report["corrupt"].append(_bad(f"{url}/{s.name}", str(exc)))
                continue
            if len(data) != s.size or crc32c(data) != s.crc32c:
                report["corrupt"].append(_bad(f"{url}/{s.name}", f"{len(data)} bytes with CRC {crc32c(data):#010x}, "
                                              f"the manifest records {s.size} bytes with CRC {s.crc32c:#010x}"))  # fmt: skip
    report["next_offset"] = index.end
    return report


def _verify_segment(store: Store, e: SegmentEntry, corrupt: list[dict[str, Any]]) -> int | None:
    """Fetch and check one shipped segment; its frame count (None if it could not be read)."""
    where = f"{store.url}/{e.name}"
    try:
        view = fetch_segment(store, e)
    except LogCorruptError as exc:
        corrupt.append({"path": exc.path or where, "position": exc.position or 0, "offset": e.base, "error": str(exc)})
        return None
    except StoreError as exc:
        corrupt.append(_bad(where, str(exc), e.base))
        return None
    frames = 0
    try:
        for cols in segment_columns(view, e.base, None, 65536):
            frames += len(cols.offsets)
    except LogCorruptError as exc:
        corrupt.append({"path": where, "position": exc.position, "offset": exc.offset, "error": str(exc)})
    finally:
        view.close()
    if frames != e.end - e.base:
        corrupt.append(_bad(where, f"{frames} frames, the manifest says offsets {e.base}..{e.end - 1}", e.base))
    return frames
