"""Writing DataFrames as jobs on a server (``.option("server", ...)``; ``sink``'s docstring):
each task puts its rows over one client connection to the primary, pipelined; at-least-once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from stalkd.client import Client, PutSpec, errors
from stalkd.client._address import AddressList, parse_addresses
from stalkd.spark.sinkrows import SinkError, as_bytes, task_id

__all__ = ["DEFAULT_PRI", "DEFAULT_TTR", "Put", "JobDefaults", "put_rows", "ServerWriter",
           "ServerStreamWriter"]

DEFAULT_PRI = 2**31
DEFAULT_TTR = 120


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
    part, _ = task_id()
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
            body = as_bytes(row[column], f"row {n + len(chunk)} of partition {part}")
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
