"""Writing DataFrames with ``format("stalkd")``: rows as jobs on a server, or frames in a log.

``.option("server", "host:port")`` (or ``unix:/path``, or ``tls://host:port?ca=FILE`` with
``cert=``/``key=`` for a client certificate; several joined by commas, a primary and its
standbys, as for every stalkd client): each partition opens one connection to the primary and
puts its rows as jobs, pipelined (``putWindow`` puts in flight). A failover during a task fails
the task; Spark's retry finds the new primary. Tube, priority, delay and ttr come from columns
of those names when present, else from options of those names (defaults: ``default``, 2**31,
0, 120). Puts cannot be taken back, so this mode is at-least-once: a retried task puts its rows
again, and ``abort`` cannot retract jobs already inserted.

``.option("path", dir)`` (or ``.save(dir)``): each task stages its frames in a file under
``dir/_spark_staging/``; the driver-side ``commit`` appends every staged file, in partition
order, under the log's writer lock, then deletes them. ``abort`` only deletes staged files, so a
failed job leaves the log unchanged. A live server holding the log's lock makes the commit fail
with LogLockedError (nothing is appended).

Streaming into a log is idempotent per batch id: each batch goes in as one write, a *batch
marker* frame (batch id, row count) followed by the rows. After a crash the log keeps a valid
prefix of that write, so on a replay the sink finds the marker, counts the rows after it and
appends only the missing ones (a replayed batch has the same rows in the same order). Marker
frames are hidden from reads unless ``.option("markers", "true")``. The log must have this sink
as its only writer.

The payload of a row is its ``payload`` column (else ``body``, else ``value``, else the only
column); binary is taken as is, strings are UTF-8 encoded.

Example::

    >>> (df.write.format("stalkd").mode("append")                           # doctest: +SKIP
    ...    .option("server", "127.0.0.1:11300").option("tube", "emails").save())
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
from pyspark.sql.types import StructType

from stalkd.client import Client, PutSpec, errors
from stalkd.client._address import AddressList, parse_addresses
from stalkd.log.fs import REAL

# A marker frame's payload starts with this; the rest is JSON {"batch": id, "rows": n}.
MARKER_MAGIC = b"\x00stalkd-spark-batch\x00"
STAGING_DIR = "_spark_staging"
_LEN = struct.Struct("<I")
_HINT = "_spark_sink.json"
DEFAULT_PRI = 2**31
DEFAULT_TTR = 120


class SinkError(RuntimeError):
    """A write that cannot go ahead; names the option, row, tube or file concerned."""


def is_marker(payload: bytes | memoryview) -> bool:
    """True for a streaming sink's batch marker frame."""
    return bytes(payload[: len(MARKER_MAGIC)]) == MARKER_MAGIC


def marker(batch_id: int, rows: int) -> bytes:
    """The marker frame payload for ``batch_id`` of ``rows`` rows.

    >>> parse_marker(marker(7, 3))
    (7, 3)
    """
    return MARKER_MAGIC + json.dumps({"batch": batch_id, "rows": rows}).encode()


def parse_marker(payload: bytes | memoryview) -> tuple[int, int]:
    meta = json.loads(bytes(payload[len(MARKER_MAGIC):]))
    return int(meta["batch"]), int(meta["rows"])


def payload_column(schema: StructType) -> str:
    """The column holding each row's payload (see the module docstring)."""
    names = schema.fieldNames()
    for name in ("payload", "body", "value"):
        if name in names:
            return name
    if len(names) == 1:
        return names[0]
    raise SinkError(f"no payload column: name one 'payload', 'body' or 'value' (columns: {names})")


def _as_bytes(value: Any, where: str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise SinkError(f"{where}: payload must be binary or string, got {type(value).__name__}")


def _task() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)


# ---------------------------------------------------------------------------- log directory


@dataclass
class Staged(WriterCommitMessage):
    """One task's staged frames: which file, how many rows."""

    partition: int
    file: str
    rows: int


def _stage(path: str, job: str, column: str, rows: Iterator[Any]) -> Staged:
    part, attempt = _task()
    staging = os.path.join(path, STAGING_DIR)
    REAL.makedirs(staging)
    name = os.path.join(staging, f"{job}-{part:05d}-{attempt}.frames")
    n = 0
    with os.fdopen(REAL.open(name + ".tmp", os.O_WRONLY, create=True, truncate=True), "wb") as f:
        for row in rows:
            data = _as_bytes(row[column], f"row {n} of partition {part}")
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


class LogDirWriter(DataSourceWriter):
    """Batch write into a log directory: tasks stage, the driver side appends on commit."""

    def __init__(self, path: str, column: str, durability: str) -> None:
        self.path = path
        self.column = column
        self.durability = durability
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> Staged:
        return _stage(self.path, self.job, self.column, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from stalkd.log import Log

        staged = _ordered(messages)
        with Log.open(self.path, durability=self.durability) as log:
            # One append for the whole job: its frames get contiguous offsets, in partition order.
            log.append_many(p for m in staged for p in _staged_payloads(m.file))
        _remove_staged(self.path, self.job)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _remove_staged(self.path, self.job, aborted=True)


class LogDirStreamWriter(DataSourceStreamWriter):
    """Streaming write into a log directory, idempotent per batch id (module docstring)."""

    def __init__(self, path: str, column: str, durability: str) -> None:
        self.path = path
        self.column = column
        self.durability = durability
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> Staged:
        return _stage(self.path, self.job, self.column, iterator)

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


# ---------------------------------------------------------------------------- server


@dataclass
class Put(WriterCommitMessage):
    """How many jobs one task put, and the range of their ids."""

    partition: int
    rows: int
    first_id: int | None
    last_id: int | None


@dataclass(frozen=True)
class JobDefaults:
    tube: str = "default"
    priority: int = DEFAULT_PRI
    delay: int = 0
    ttr: int = DEFAULT_TTR


def _addr(server: str) -> AddressList:
    """``server`` in the address grammar every stalkd client reads (``host:port``,
    ``unix:/path``, ``tls://host:port?ca=...&cert=...&key=...``, several joined by commas),
    checked on the driver."""
    try:
        return parse_addresses(server)
    except ValueError as e:
        raise SinkError(f"option server={server!r}: {e}") from None


def put_rows(server: str, rows: Iterator[Any], column: str, names: Sequence[str], defaults: JobDefaults,
             *, window: int = 512, timeout: float = 30.0) -> Put:
    """Put every row as a job over one connection, ``window`` puts per pipelined write;
    returns the count and the range of ids."""
    part, _ = _task()
    cols = set(names)
    first: int | None = None
    last: int | None = None
    n = 0
    try:
        client = Client(server, timeout=timeout, reconnect=False)
    except errors.ClientConnectionError as e:
        raise SinkError(f"{server}: {e}") from e
    try:
        tube = defaults.tube
        chunk: list[PutSpec] = []

        def flush() -> None:
            nonlocal first, last, n
            if not chunk:
                return
            try:
                ids = client.put_many(chunk, tube=tube)
            except errors.BeanstalkError as e:
                row = n + (e.batch_index or 0)
                raise SinkError(f"{server}: put of row {row} of partition {part} (tube {tube!r}) "
                                f"failed: {e}") from e
            except (errors.ClientConnectionError, ValueError) as e:
                raise SinkError(f"{server}: put of rows {n}..{n + len(chunk) - 1} of partition "
                                f"{part} (tube {tube!r}) failed: {e}") from e
            first = ids[0] if first is None else first
            last = ids[-1]
            n += len(chunk)
            chunk.clear()

        for row in rows:
            row_tube = str(row["tube"]) if "tube" in cols and row["tube"] is not None else defaults.tube
            if row_tube != tube:
                flush()  # each pipelined write goes to one tube
                tube = row_tube
            body = _as_bytes(row[column], f"row {n + len(chunk)} of partition {part}")
            chunk.append(PutSpec(body, _field(row, "priority", cols, defaults.priority),
                                 _field(row, "delay", cols, defaults.delay),
                                 _field(row, "ttr", cols, defaults.ttr)))
            if len(chunk) >= window:
                flush()
        flush()
    finally:
        client.close()
    return Put(part, n, first, last)


def _field(row: Any, name: str, cols: set[str], default: int) -> int:
    if name in cols and row[name] is not None:
        return int(row[name])
    return default


class ServerWriter(DataSourceWriter):
    """Batch write of rows as jobs to a beanstalkd-compatible server (at-least-once)."""

    def __init__(self, server: str, column: str, names: Sequence[str], defaults: JobDefaults, window: int) -> None:
        _addr(server)
        self.server, self.column, self.names, self.defaults, self.window = server, column, list(names), defaults, window

    def write(self, iterator: Iterator[Any]) -> Put:
        return put_rows(self.server, iterator, self.column, self.names, self.defaults, window=self.window)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Jobs are live once put; nothing to publish."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Jobs already put stay (a queue has no transactions): at-least-once."""


class ServerStreamWriter(DataSourceStreamWriter):
    """Streaming puts to a server; at-least-once (a replayed batch puts its rows again)."""

    def __init__(self, inner: ServerWriter) -> None:
        self.inner = inner

    def write(self, iterator: Iterator[Any]) -> Put:
        return self.inner.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to publish."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Jobs already put stay."""


def _int_opt(options: dict[str, str], key: str, default: int) -> int:
    value = options.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise SinkError(f"option {key}={value!r}: expected an integer") from None


def _target(options: dict[str, str], schema: StructType, overwrite: bool) -> tuple[str, Any]:
    opts = {k.lower(): v for k, v in options.items()}
    if overwrite:
        raise SinkError("stalkd logs and queues are append-only: use .mode('append')")
    column = opts.get("column") or payload_column(schema)
    if column not in schema.fieldNames():
        raise SinkError(f"option column={column!r}: no such column (columns: {schema.fieldNames()})")
    if opts.get("server"):
        defaults = JobDefaults(
            tube=opts.get("tube", "default"),
            priority=_int_opt(opts, "priority", DEFAULT_PRI),
            delay=_int_opt(opts, "delay", 0),
            ttr=_int_opt(opts, "ttr", DEFAULT_TTR),
        )
        return "server", ServerWriter(opts["server"], column, schema.fieldNames(), defaults,
                                      max(2, _int_opt(opts, "putwindow", 512)))  # fmt: skip
    path = opts.get("path")
    if not path:
        raise SinkError("the stalkd sink needs .option('server', 'host:port') or a log directory: .save(dir)")
    return "path", (path, column, opts.get("durability", "always"))


def make_writer(options: dict[str, str], schema: StructType, overwrite: bool) -> DataSourceWriter:
    kind, target = _target(options, schema, overwrite)
    if kind == "server":
        writer: DataSourceWriter = target
        return writer
    return LogDirWriter(*target)


def make_stream_writer(options: dict[str, str], schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
    kind, target = _target(options, schema, overwrite)
    if kind == "server":
        return ServerStreamWriter(target)
    return LogDirStreamWriter(*target)
