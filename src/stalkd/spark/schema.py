"""Row schemas of the ``stalkd`` data source, as Spark types and as the matching Arrow types.

Ensures: for each schema the Arrow form is exactly what Spark expects back from ``read()``
(same names, types, nullability and a UTC microsecond timestamp), so batches never fail with
DATA_SOURCE_RETURN_SCHEMA_MISMATCH (Spark compares the Arrow schema exactly). The Spark form is a ``StructType``
kept in the module, because DDL strings only parse with an active session.

Example::

    >>> RAW_ARROW.names
    ['offset', 'timestamp', 'payload']
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from stalkd.engine.model import Op

# Raw frames: one row per log frame, payload untouched.
RAW_SCHEMA = StructType([
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), False),
    StructField("payload", BinaryType(), False),
])

# Decoded WAL records (``.option("records", "wal")``): one row per record. Columns an op does
# not carry are null, e.g. ``tube`` of a reserve (join on ``job_id`` to get it).
WAL_SCHEMA = StructType([
    StructField("offset", LongType(), False),  # log offset of the frame
    StructField("seq", LongType(), False),  # the engine's record sequence number
    StructField("time", TimestampType(), False),  # when the engine made the change
    StructField("op", StringType(), False),  # put, delete, release, bury, kick, touch, reserve, ...
    StructField("job_id", LongType(), False),
    StructField("tube", StringType(), True),
    StructField("priority", LongType(), True),
    StructField("delay", LongType(), True),  # seconds
    StructField("ttr", LongType(), True),  # seconds
    StructField("deadline", TimestampType(), True),  # delayed until / paused until / result kept until
    StructField("state", StringType(), True),  # job records only: ready, reserved, buried, delayed
    StructField("created", TimestampType(), True),  # put and job records
    StructField("body_size", LongType(), True),  # put and job records; a result's size
    StructField("body", BinaryType(), True),  # only with .option("body", "true")
])

_TS = pa.timestamp("us", tz="UTC")


def _arrow(schema: StructType) -> pa.Schema:
    kinds = {LongType: pa.int64(), StringType: pa.string(), BinaryType: pa.binary(), TimestampType: _TS}
    return pa.schema([pa.field(f.name, kinds[type(f.dataType)], nullable=f.nullable) for f in schema.fields])


RAW_ARROW = _arrow(RAW_SCHEMA)
WAL_ARROW = _arrow(WAL_SCHEMA)

# Op names as they appear in the ``op`` column.
OP_NAMES: dict[int, str] = {int(op): op.name.lower() for op in Op}
