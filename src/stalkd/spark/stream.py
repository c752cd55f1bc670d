"""The ``stalkd`` source's streaming reader: micro-batches over a growing log, its offsets
the log's own (``source``'s docstring).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from stalkd.spark.locations import is_archive
from stalkd.spark.reading import groups, read_partition, segments
from stalkd.spark.readoptions import ReadOptions, SourceOptionError, int_option

__all__ = ["StalkdStreamReader", "ARCHIVE_POLL"]

ARCHIVE_POLL = 1.0  # seconds between reads of an archive's manifest by a streaming query


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
        self.max_rows = int_option(lowered, "maxrecordspertrigger", 0, minimum=0)
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
                segs = segments(self.opts)
                self._archive_end = (now, (segs[-1].end or 0) if segs else 0)
            return self._archive_end[1]
        segs = segments(self.opts)
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
        segs = segments(self.opts)
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
        return list(groups(self.opts, lo, hi))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the log's own retention decides what to keep (pitfall 11)."""
