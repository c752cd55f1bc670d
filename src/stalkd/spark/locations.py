"""Where the ``stalkd`` source reads from: a local log, a server data directory, or an archive.

What a person types is resolved once, on the driver side (:func:`resolve`): a log directory,
a server data directory (its ``wal/``; see :func:`stalkd.log.layout.resolve_log_dir`), an
archive URL (``s3://``, ``gs://``, ``hdfs://``, ``file://``) or a local directory holding an
archive manifest. A path that is none of these is an error naming what was expected.

An archive is planned from its manifest alone (no listing), and segments whose frame time
range misses a pushed-down time bound are skipped; each executor fetches its segments with
ranged reads (:func:`stalkd.archive.remote.fetch_segment`) and scans them with the log's own
column scan, so rows are exactly what the log's reader would give for the same segment.

Example::

    >>> # resolve("/data") -> "/data/wal";  resolve("s3://bucket/q") -> "s3://bucket/q"
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

from stalkd.archive.manifest import MANIFEST_NAME, SegmentEntry
from stalkd.archive.note import ARCHIVE_URL_FILE, read_note
from stalkd.archive.remote import fetch_segment, load_segments
from stalkd.archive.store import Store, is_url
from stalkd.log.columns import FrameColumns, segment_columns
from stalkd.log.layout import DATA_LOG_DIR, resolve_log_dir
from stalkd.spark.partitions import LogSlice, Segment

__all__ = ["resolve", "is_archive", "archive_segments", "archive_columns", "with_shipped", "ARCHIVE_URL_FILE"]



def is_archive(path: str) -> bool:
    """True for an archive URL, or a local directory holding an archive manifest."""
    return is_url(path) or (Path(path) / MANIFEST_NAME).is_file()


def resolve(path: str) -> str:
    """The log directory or archive root ``path`` names (NotALogError if it holds neither)."""
    if is_archive(path):
        return path
    return str(resolve_log_dir(path))


@functools.lru_cache(maxsize=8)
def _store(url: str) -> Store:
    return Store.open(url)


def archive_segments(url: str, t_lo: int | None = None, t_hi: int | None = None,
                     end_before: int | None = None) -> list[Segment]:  # fmt: skip
    """The archive's segments from its manifest; those wholly outside ``[t_lo, t_hi]`` (us) or
    starting at or after ``end_before`` skipped (the manifest parts holding none are not read)."""
    return [Segment(e.name, e.base, e.end, (url, e.end, e.size, e.crc32c))
            for e in load_segments(_store(url), t_lo=t_lo, t_hi=t_hi, end_before=end_before)]


def shipped_url(log_dir: str) -> str | None:
    """The archive URL a server ships ``log_dir`` to (``DATA/archive.url``), if it does."""
    p = Path(log_dir)
    return read_note(str(p.parent)) if p.name == DATA_LOG_DIR else None


def with_shipped(log_dir: str, local: list[Segment]) -> list[Segment]:
    """``local`` preceded by the shipped segments older than all of them (retention deleted
    those locally once they were shipped); ``local`` alone where nothing is shipped."""
    url = shipped_url(log_dir)
    if url is None:
        return local
    first = local[0].base if local else None
    older = [s for s in archive_segments(url, end_before=first) if first is None or s.end is not None and s.end <= first]
    return older + local


def archive_columns(part: LogSlice, batch_size: int) -> Iterator[FrameColumns]:
    """Column chunks of an archived slice (fetched, checked against the manifest, then scanned)."""
    assert part.obj is not None
    url, end, size, crc = part.obj
    view = fetch_segment(_store(url), SegmentEntry(part.path, part.base, end, 0, 0, size, crc))
    try:
        yield from segment_columns(view, part.start, part.end, batch_size)
    finally:
        view.close()
