"""What the ``stalkd`` source reads: the segments of a log, a data directory or an archive,
planned into slices grouped as partitions (on the driver), and each partition read back as
Arrow batches (on an executor). The batch and streaming readers share these.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from stalkd.log.columns import FrameColumns
from stalkd.spark.columnar import raw_columns_batch, split_by_span, wal_columns_batch
from stalkd.spark.locations import archive_columns, archive_segments, is_archive, with_shipped
from stalkd.spark.partitions import LogSlice, Segment, SliceGroup, available_cores, group, plan
from stalkd.spark.readoptions import ReadOptions

__all__ = ["segments", "groups", "read_slice", "read_partition"]


def segments(opts: ReadOptions, t_lo: int | None = None, t_hi: int | None = None) -> list[Segment]:
    from stalkd.log import LogReader

    if is_archive(opts.path):
        return archive_segments(opts.path, t_lo, t_hi)
    if not os.path.isdir(opts.path):
        raise FileNotFoundError(f"stalkd source: log directory {opts.path!r} does not exist")
    seen: dict[int, Segment] = {}
    with LogReader(opts.path, archive=opts.archive) as reader:
        infos = reader.segments()
    for info in infos:
        # A segment caught mid-move to the archive may be listed twice: keep the live copy.
        if info.base_offset not in seen or not info.archived:
            seen[info.base_offset] = Segment(str(info.path), info.base_offset, info.end_offset)
    local = [seen[b] for b in sorted(seen)]
    return local if opts.archive is False else with_shipped(opts.path, local)


def read_slice(opts: ReadOptions, part: LogSlice) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one slice, in offset order."""
    from stalkd.log import LogReader

    if part.obj is not None:  # an archived object: fetched from the store
        for cols in archive_columns(part, opts.batch_size):
            for piece in split_by_span(cols):
                batch = _batch(opts, piece)
                if batch is not None:
                    yield batch
        return
    reader = LogReader(opts.path, archive=opts.archive)
    path = part.path
    if not os.path.exists(path):
        # Archived (moved) between planning and reading: find it again by its base offset.
        with LogReader(opts.path, archive=True) as again:
            moved = [s.path for s in again.segments() if s.base_offset == part.base]
        if not moved:
            raise FileNotFoundError(f"segment {path} (base offset {part.base}) vanished before it was read; "
                                    "retention deleted it: rerun, or read with a later startOffset")
        path = str(moved[0])
    try:
        # Columnar chunks: no Python object per frame (the per-frame path was ~70% of a read).
        for chunk in reader.read_segment_columns(path, part.start, part.end, opts.batch_size):
            for cols in split_by_span(chunk):
                batch = _batch(opts, cols)
                del cols  # drop the view of the mapping before it is closed
                if batch is not None:
                    yield batch
            del chunk
    finally:
        reader.close()


def _batch(opts: ReadOptions, cols: FrameColumns) -> pa.RecordBatch | None:
    if opts.records == "wal":
        return wal_columns_batch(cols, with_body=opts.body, markers=opts.markers)
    return raw_columns_batch(cols, markers=opts.markers)


def groups(opts: ReadOptions, lo: int, hi: int | None, t_lo: int | None = None,
            t_hi: int | None = None) -> list[SliceGroup]:
    slices = plan(segments(opts, t_lo, t_hi), lo, hi, opts.slice_records)
    return group(slices, opts.partitions or available_cores(), opts.slice_records)


def read_partition(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one planned partition (a ``SliceGroup``), in offset order."""
    if not isinstance(partition, SliceGroup):  # an empty plan becomes InputPartition(None)
        return iter(())
    return (batch for part in partition.slices for batch in read_slice(opts, part))
