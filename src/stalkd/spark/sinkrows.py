"""What both writers of ``format("stalkd")`` read from a row (``sink``'s docstring): which column
is the payload and its bytes, which task is writing, and the error naming what is wrong.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import StructType

__all__ = ["SinkError", "payload_column", "as_bytes", "task_id"]


class SinkError(RuntimeError):
    """A write that cannot go ahead; names the option, row, tube or file concerned."""


def payload_column(schema: StructType) -> str:
    """The column holding each row's payload (``payload``, else ``body``, else ``value``, else
    the only column)."""
    names = schema.fieldNames()
    for name in ("payload", "body", "value"):
        if name in names:
            return name
    if len(names) == 1:
        return names[0]
    raise SinkError(f"no payload column: name one 'payload', 'body' or 'value' (columns: {names})")


def as_bytes(value: Any, where: str) -> bytes:
    """A payload as bytes: binary as is, a string as UTF-8 (``where`` names the row)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise SinkError(f"{where}: payload must be binary or string, got {type(value).__name__}")


def task_id() -> tuple[int, int]:
    """(partition, attempt) of the Spark task running this; (0, 0) outside one."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)
