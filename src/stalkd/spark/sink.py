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

from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from stalkd.spark.logsink import STAGING_DIR, LogDirStreamWriter, LogDirWriter, Staged
from stalkd.spark.markers import MARKER_MAGIC, is_marker, marker, parse_marker
from stalkd.spark.serversink import (
    DEFAULT_PRI,
    DEFAULT_TTR,
    JobDefaults,
    Put,
    ServerStreamWriter,
    ServerWriter,
    put_rows,
)
from stalkd.spark.sinkrows import SinkError, payload_column

# the writers live in logsink and serversink; their names are re-exported here, where
# callers have imported them from
__all__ = ["make_writer", "make_stream_writer", "SinkError", "payload_column", "MARKER_MAGIC",
           "is_marker", "marker", "parse_marker", "STAGING_DIR", "Staged", "LogDirWriter",
           "LogDirStreamWriter", "DEFAULT_PRI", "DEFAULT_TTR", "JobDefaults", "Put",
           "ServerWriter", "ServerStreamWriter", "put_rows"]


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
