"""The ``stalkd`` PySpark data source: batch and streaming reads of a log directory.

``load(path)`` takes a log directory, a server data directory (its ``wal/``), or an archive
written by ``stalkd serve --archive URL`` (``s3://...``, ``gs://...``, ``hdfs://...`` or a
local directory; see :mod:`stalkd.spark.locations`); a path holding none of these is an error.

Batch: ``spark.read.format("stalkd").load(dir)`` gives one row per frame (``RAW_SCHEMA``);
``.option("records", "wal")`` decodes WAL records (``WAL_SCHEMA``, add ``.option("body",
"true")`` for job bodies). Segments are read as slices, large sealed ones split into slices of
``maxRecordsPerPartition`` records (a slice that starts mid-segment scans the frames before it,
so split only segments much larger than the default), and consecutive slices are grouped into
about one partition per core (``partitions``; see :mod:`stalkd.spark.partitions`); rows come
back as Arrow batches of ``batchSize`` rows (fewer where a batch would span more than 64 MiB
of a segment).

Options (all strings, as Spark passes them):
  archive              "true" (live segments and the archive, default), "false", "only"
  startOffset          first log offset to read (inclusive)
  endOffset            log offset to stop before (exclusive)
  partitions           how many partitions to aim for (default: the CPUs of the planning host,
                       which on local[*] is Spark's parallelism; set it on a cluster);
                       never more than the slices, more if a partition would exceed
                       maxRecordsPerPartition
  pushdown             "true": also prune by ``offset`` filters in the query, and an
                       archive's segments by ``timestamp`` / ``time`` filters (needs
                       ``spark.sql.python.filterPushdown.enabled=true``, which
                       :func:`stalkd.spark.session.build_session` sets)
  startingOffsets      streaming: "earliest" (default), "latest", or a log offset
  maxRecordsPerTrigger streaming: at most this many records per micro-batch
  markers              "true": also show the streaming sink's batch marker frames

Streaming offsets are ``{"offset": N}``: the next log offset to read. Because log offsets are
global and never reused, a restart from a checkpoint resumes exactly after the last record of
the last committed batch.

Ensures: a read sees exactly the frames the log's own ``LogReader`` sees for the same range
(committed frames only; a torn tail is not a row); nothing here takes the writer lock.

Example::

    >>> df = spark.read.format("stalkd").option("records", "wal").load("data/wal")  # doctest: +SKIP
    >>> df.groupBy("op").count().show()                                         # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from stalkd.log.columns import FrameColumns
from stalkd.spark.columnar import raw_columns_batch, split_by_span, wal_columns_batch
from stalkd.spark.locations import (
    archive_columns,
    archive_segments,
    is_archive,
    resolve,
    with_shipped,
)
from stalkd.spark.partitions import LogSlice, Segment, SliceGroup, available_cores, group, plan
from stalkd.spark.schema import RAW_SCHEMA, WAL_SCHEMA

ArchiveMode = bool | Literal["only"]
DEFAULT_BATCH = 65536  # rows; fewer per-batch costs on both sides than 8192 (~5-10% CPU)
DEFAULT_SLICE = 1_000_000
ARCHIVE_POLL = 1.0  # seconds between reads of an archive's manifest by a streaming query


class SourceOptionError(ValueError):
    """A ``stalkd`` source option with a bad value; names the option."""


@dataclass(frozen=True)
class ReadOptions:
    """The parsed source options (see the module docstring)."""

    path: str
    records: Literal["raw", "wal"] = "raw"
    body: bool = False
    archive: ArchiveMode = True
    start: int = 0
    end: int | None = None
    batch_size: int = DEFAULT_BATCH
    slice_records: int = DEFAULT_SLICE
    partitions: int = 0  # 0: one per core of the planning host
    pushdown: bool = False
    markers: bool = False

    @classmethod
    def parse(cls, options: Any) -> ReadOptions:
        opts = {str(k).lower(): str(v) for k, v in dict(options).items()}
        path = opts.get("path")
        if not path:
            raise SourceOptionError("the stalkd source needs a log directory: .load(dir) or .option('path', dir)")
        records = opts.get("records", "raw").lower()
        if records not in ("raw", "wal"):
            raise SourceOptionError(f"option records={records!r}: expected 'raw' or 'wal'")
        archive_s = opts.get("archive", "true").lower()
        archive: ArchiveMode = {"true": True, "false": False, "only": "only"}.get(archive_s)  # type: ignore[assignment]
        if archive is None:
            raise SourceOptionError(f"option archive={archive_s!r}: expected 'true', 'false' or 'only'")
        end_s = opts.get("endoffset")
        return cls(
            path=path,
            records=records,  # type: ignore[arg-type]
            body=_flag(opts, "body"),
            archive=archive,
            start=_int(opts, "startoffset", 0),
            end=None if end_s is None else _int(opts, "endoffset", 0),
            batch_size=_int(opts, "batchsize", DEFAULT_BATCH, minimum=1),
            slice_records=_int(opts, "maxrecordsperpartition", DEFAULT_SLICE, minimum=1),
            partitions=_int(opts, "partitions", 0, minimum=1),
            pushdown=_flag(opts, "pushdown"),
            markers=_flag(opts, "markers"),
        )


def _flag(opts: dict[str, str], key: str) -> bool:
    value = opts.get(key, "false").lower()
    if value not in ("true", "false"):
        raise SourceOptionError(f"option {key}={value!r}: expected 'true' or 'false'")
    return value == "true"


def _int(opts: dict[str, str], key: str, default: int, minimum: int = 0) -> int:
    if key not in opts:
        return default
    try:
        value = int(opts[key])
    except ValueError:
        raise SourceOptionError(f"option {key}={opts[key]!r}: expected an integer") from None
    if value < minimum:
        raise SourceOptionError(f"option {key}={value}: must be at least {minimum}")
    return value


def _segments(opts: ReadOptions, t_lo: int | None = None, t_hi: int | None = None) -> list[Segment]:
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


def _groups(opts: ReadOptions, lo: int, hi: int | None, t_lo: int | None = None,
            t_hi: int | None = None) -> list[SliceGroup]:
    slices = plan(_segments(opts, t_lo, t_hi), lo, hi, opts.slice_records)
    return group(slices, opts.partitions or available_cores(), opts.slice_records)


def read_partition(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one planned partition (a ``SliceGroup``), in offset order."""
    if not isinstance(partition, SliceGroup):  # an empty plan becomes InputPartition(None)
        return iter(())
    return (batch for part in partition.slices for batch in read_slice(opts, part))


class StalkdReader(DataSourceReader):
    """Batch reader: plans slices on the driver side, reads them on executors."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.lo = opts.start
        self.hi = opts.end
        self.t_lo: int | None = None  # frame time bounds (us, inclusive) from pushed filters
        self.t_hi: int | None = None

    def partitions(self) -> list[InputPartition]:
        return list(_groups(self.opts, self.lo, self.hi, self.t_lo, self.t_hi))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)


class StalkdPushdownReader(StalkdReader):
    """Batch reader that also narrows ``[lo, hi)`` from ``offset`` comparisons in the query."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        time_col = ("time",) if self.opts.records == "wal" else ("timestamp",)
        for f in filters:
            v = getattr(f, "value", None)
            if getattr(f, "attribute", None) == time_col and isinstance(v, datetime):
                # Archive planning skips segments outside the bound; Spark still filters rows.
                us = _micros(v)
                if isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
                    self.t_lo = us if self.t_lo is None else max(self.t_lo, us)
                if isinstance(f, LessThan | LessThanOrEqual | EqualTo):
                    self.t_hi = us if self.t_hi is None else min(self.t_hi, us)
                yield f
                continue
            if getattr(f, "attribute", None) != ("offset",) or not isinstance(v, int) or isinstance(v, bool):
                yield f
                continue
            if isinstance(f, GreaterThanOrEqual):
                self.lo = max(self.lo, v)
            elif isinstance(f, GreaterThan):
                self.lo = max(self.lo, v + 1)
            elif isinstance(f, LessThan):
                self.hi = v if self.hi is None else min(self.hi, v)
            elif isinstance(f, LessThanOrEqual):
                self.hi = v + 1 if self.hi is None else min(self.hi, v + 1)
            elif isinstance(f, EqualTo):
                self.lo = max(self.lo, v)
                self.hi = v + 1 if self.hi is None else min(self.hi, v + 1)
            else:
                yield f


def _micros(v: datetime) -> int:
    """Microseconds since the epoch; a naive value is taken as UTC (the sessions' time zone)."""
    if v.tzinfo is None:
        v = v.replace(tzinfo=UTC)
    return (v - _EPOCH) // timedelta(microseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class StalkdStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over a growing log; offsets are ``{"offset": next log offset}``.

    Lives in one long-lived Python process per query (Spark keeps the reader across
    micro-batches), so the end of
    the active segment is cached and rescanned only when the segment file changed.
    """

    def __init__(self, opts: ReadOptions, raw: Mapping[str, str]) -> None:
        self.opts = opts
        lowered = {str(k).lower(): str(v) for k, v in dict(raw).items()}
        self.starting = lowered.get("startingoffsets", "earliest").lower()
        if self.starting not in ("earliest", "latest") and not self.starting.isdigit():
            raise SourceOptionError(f"option startingOffsets={self.starting!r}: expected 'earliest', "
                                    "'latest' or a log offset")
        self.max_rows = _int(lowered, "maxrecordspertrigger", 0, minimum=0)
        self._target: int | None = None
        self._tail: tuple[Any, Any] | None = None  # (active segment's view, where its scan stopped)
        self._archive_end: tuple[float, int] | None = None  # (when read, end) of an archive's manifest

    def _end(self) -> int:
        """The log's end offset; on an idle log this reads one frame header, not the segment."""
        from stalkd.log.segment import HEADER_SIZE, ScanState, SegmentView

        if is_archive(self.opts.path):
            # One manifest GET per ARCHIVE_POLL seconds, however often Spark asks (pitfall 12).
            now = time.monotonic()
            if self._archive_end is None or now - self._archive_end[0] >= ARCHIVE_POLL:
                segs = _segments(self.opts)
                self._archive_end = (now, (segs[-1].end or 0) if segs else 0)
            return self._archive_end[1]
        segs = _segments(self.opts)
        if not segs:
            return 0
        last = segs[-1]
        if last.end is not None:
            return last.end
        if self._tail is None or self._tail[0].path != last.path:
            self._tail = (SegmentView(last.path), ScanState(HEADER_SIZE, last.base))
        view, st = self._tail
        # Resume the scan where the previous call stopped: only frames appended since are read.
        for _ in view.frames(st.offset, None, (st.offset, st.pos), st):
            pass
        return int(st.offset)

    def initialOffset(self) -> dict[str, int]:
        if self.starting == "latest":
            return {"offset": self._end()}
        if self.starting.isdigit():
            return {"offset": int(self.starting)}
        segs = _segments(self.opts)
        return {"offset": max(self.opts.start, segs[0].base if segs else 0)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._end()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        end = self._target if self._target is not None else self._end()
        begin = int(start["offset"])
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return {"offset": max(begin, end)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        lo, hi = int(start["offset"]), int(end["offset"])
        if lo >= hi:
            return []
        return list(_groups(self.opts, lo, hi))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the log's own retention decides what to keep (pitfall 11)."""


class StalkdDataSource(DataSource):
    """``format("stalkd")``: read a log directory, or write rows to a log directory or a server."""

    @classmethod
    def name(cls) -> str:
        return "stalkd"

    def _opts(self) -> ReadOptions:
        opts = ReadOptions.parse(self.options)
        return replace(opts, path=resolve(opts.path))

    def schema(self) -> StructType:
        records = str(dict(self.options).get("records", "raw")).lower()
        return WAL_SCHEMA if records == "wal" else RAW_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._opts()
        return StalkdPushdownReader(opts) if opts.pushdown else StalkdReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StalkdStreamReader(self._opts(), self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from stalkd.spark.sink import make_writer

        return make_writer(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from stalkd.spark.sink import make_stream_writer

        return make_stream_writer(dict(self.options), schema, overwrite)
