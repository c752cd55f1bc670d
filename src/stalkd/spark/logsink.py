"""Writing DataFrames into a log directory (``.save(dir)``; ``sink``'s docstring): tasks stage
their frames under ``dir/_spark_staging/``, the driver appends them on commit under the log's
writer lock; a streamed batch goes in after its marker frame (``markers``), so a replay
appends only the rows a crash cut off.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from stalkd.log.fs import REAL
from stalkd.spark.markers import is_marker, marker, parse_marker
from stalkd.spark.sinkrows import SinkError, as_bytes, task_id

__all__ = ["STAGING_DIR", "Staged", "LogDirWriter", "LogDirStreamWriter"]

STAGING_DIR = "_spark_staging"
_LEN = struct.Struct("<I")
_HINT = "_spark_sink.json"


@dataclass
class Staged(WriterCommitMessage):
    """One task's staged frames: which file, how many rows."""

    partition: int
    file: str
    rows: int


def _stage(path: str, job: str, column: str, rows: Iterator[Any]) -> Staged:
    part, attempt = task_id()
    staging = os.path.join(path, STAGING_DIR)
    REAL.makedirs(staging)
    name = os.path.join(staging, f"{job}-{part:05d}-{attempt}.frames")
    n = 0
    with os.fdopen(REAL.open(name + ".tmp", os.O_WRONLY, create=True, truncate=True), "wb") as f:
        for row in rows:
            data = as_bytes(row[column], f"row {n} of partition {part}")
            f.write(_LEN.pack(len(data)))
            f.write(data)
            n += 1
        f.flush()
        os.fsync(f.fileno())
    try:
        os.replace(name + ".tmp", name)
    except FileNotFoundError:
        raise SinkError(f"write job {job} was aborted while partition {part} was staging") from None
    # A task can outlive its job's abort (Spark does not wait for running tasks). The abort
    # marks the job before it deletes staged files, and the task looks for that mark only
    # after its file is in place: so either the abort sees the file, or the task sees the mark.
    if os.path.exists(_abort_mark(path, job)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
    return Staged(part, name, n)


def _abort_mark(path: str, job: str) -> str:
    return os.path.join(path, STAGING_DIR, f"{job}.aborted")


def _staged_payloads(file: str) -> Iterator[bytes]:
    data = REAL.read_file(file)
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise SinkError(f"{file}: staged frames truncated at byte {pos}")
        (n,) = _LEN.unpack_from(data, pos)
        if pos + 4 + n > len(data):
            raise SinkError(f"{file}: staged frame at byte {pos} runs past the end of the file")
        yield data[pos + 4 : pos + 4 + n]
        pos += 4 + n


def _remove_staged(path: str, job: str, *, aborted: bool = False) -> None:
    staging = os.path.join(path, STAGING_DIR)
    if aborted:
        REAL.makedirs(staging)
        os.close(REAL.open(_abort_mark(path, job), os.O_WRONLY, create=True))
    try:
        names = os.listdir(staging)
    except FileNotFoundError:
        return
    now = time.time()
    for name in names:
        full = os.path.join(staging, name)
        if name.startswith(job + "-"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(full)
        elif name.endswith(".aborted"):
            # Marks of earlier aborted jobs: kept an hour for their straggling tasks.
            with contextlib.suppress(FileNotFoundError):
                if now - os.stat(full).st_mtime > 3600:
                    os.unlink(full)


def _ordered(messages: Sequence[Any]) -> list[Staged]:
    staged = [m for m in messages if isinstance(m, Staged)]
    return sorted(staged, key=lambda m: m.partition)


class _Staging:
    """Both writers' task side: each task stages its rows in a file of this write job."""

    def __init__(self, path: str, column: str, durability: str) -> None:
        self.path = path
        self.column = column
        self.durability = durability
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> Staged:
        return _stage(self.path, self.job, self.column, iterator)


class LogDirWriter(_Staging, DataSourceWriter):
    """Batch write into a log directory: tasks stage, the driver side appends on commit."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from stalkd.log import Log

        staged = _ordered(messages)
        with Log.open(self.path, durability=self.durability) as log:
            # One append for the whole job: its frames get contiguous offsets, in partition order.
            log.append_many(p for m in staged for p in _staged_payloads(m.file))
        _remove_staged(self.path, self.job)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _remove_staged(self.path, self.job, aborted=True)


class LogDirStreamWriter(_Staging, DataSourceStreamWriter):
    """Streaming write into a log directory, idempotent per batch id (``sink``'s docstring)."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from stalkd.log import Log

        staged = _ordered(messages)
        payloads = [p for m in staged for p in _staged_payloads(m.file)]
        with Log.open(self.path, durability=self.durability) as log:
            last = _last_marker(self.path, log.next_offset)
            if last is not None and batchId < last.batch:
                pass  # an old batch replayed: everything it wrote is already in
            elif last is not None and batchId == last.batch:
                have = log.next_offset - last.offset - 1
                if last.rows != len(payloads):
                    raise SinkError(f"{self.path}: batch {batchId} replayed with {len(payloads)} rows, "
                                    f"but its marker at offset {last.offset} says {last.rows}")
                if have < last.rows:
                    log.append_many(payloads[have:])
            else:
                first, _ = log.append_many([marker(batchId, len(payloads)), *payloads])
                _write_hint(self.path, batchId, first)
        _remove_staged(self.path, self.job)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _remove_staged(self.path, self.job, aborted=True)


@dataclass(frozen=True)
class _Marker:
    batch: int
    rows: int
    offset: int


def _write_hint(path: str, batch: int, offset: int) -> None:
    # Only a hint where to start looking for the last marker; the marker frames are the truth.
    tmp = os.path.join(path, _HINT + ".tmp")
    with os.fdopen(REAL.open(tmp, os.O_WRONLY, create=True, truncate=True), "w") as f:
        json.dump({"batch": batch, "offset": offset}, f)
    os.replace(tmp, os.path.join(path, _HINT))


def _last_marker(path: str, end: int) -> _Marker | None:
    """The newest batch marker below ``end``: scanned from the hint, or from the start."""
    start = 0
    try:
        start = min(int(json.loads(REAL.read_file(os.path.join(path, _HINT)))["offset"]), end)
    except (FileNotFoundError, ValueError, KeyError):
        start = 0
    found = _scan_markers(path, start, end)
    if found is None and start > 0:
        found = _scan_markers(path, 0, end)  # a stale hint (the log was replaced): scan it all
    return found


def _scan_markers(path: str, start: int, end: int) -> _Marker | None:
    from stalkd.log import LogReader

    found: _Marker | None = None
    with LogReader(path) as reader:
        for frame in reader.read(start, end):
            if is_marker(frame.payload):
                batch, rows = parse_marker(frame.payload)
                found = _Marker(batch, rows, frame.offset)
    return found
