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

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

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
from pyspark.sql.types import StructType

from stalkd.spark.locations import resolve
from stalkd.spark.reading import groups, read_partition, read_slice
from stalkd.spark.readoptions import DEFAULT_BATCH, DEFAULT_SLICE, ReadOptions, SourceOptionError
from stalkd.spark.schema import RAW_SCHEMA, WAL_SCHEMA
from stalkd.spark.stream import ARCHIVE_POLL, StalkdStreamReader

# options, reading and streaming live in readoptions, reading and stream; their names are
# re-exported here, where callers have imported them from
__all__ = ["StalkdDataSource", "StalkdReader", "StalkdPushdownReader", "StalkdStreamReader",
           "ReadOptions", "SourceOptionError", "DEFAULT_BATCH", "DEFAULT_SLICE", "ARCHIVE_POLL",
           "read_slice", "read_partition"]


class StalkdReader(DataSourceReader):
    """Batch reader: plans slices on the driver side, reads them on executors."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.lo = opts.start
        self.hi = opts.end
        self.t_lo: int | None = None  # frame time bounds (us, inclusive) from pushed filters
        self.t_hi: int | None = None

    def partitions(self) -> list[InputPartition]:
        return list(groups(self.opts, self.lo, self.hi, self.t_lo, self.t_hi))

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
