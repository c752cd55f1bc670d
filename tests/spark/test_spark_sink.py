"""Writes: into a log directory (commit, and abort on an injected task failure), idempotent
streaming commits across a crash gap, and rows as jobs on a real beanstalkd-compatible server."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from stalkd.log import Log, LogReader
from stalkd.spark.sink import LogDirStreamWriter, Staged, is_marker, marker

pytestmark = pytest.mark.spark


def _payloads(path: Path) -> list[bytes]:
    with LogReader(path) as r:
        return [f.bytes() for f in r.read()]


def test_batch_write_commits_in_partition_order_and_abort_leaves_log_unchanged(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    with Log.open(path, segment_size=4096, durability="never") as log:
        log.append(b"existing")
    df = spark.range(0, 300, 1, 3).select(F.format_string("row-%03d", "id").alias("payload"))
    df.write.format("stalkd").mode("append").save(str(path))
    assert _payloads(path) == [b"existing"] + [f"row-{i:03d}".encode() for i in range(300)]
    assert os.listdir(path / "_spark_staging") == []

    # Given a job whose third partition fails mid-way, when it runs, then nothing is appended.
    boom = F.udf(lambda i: 1 // 0 if i == 250 else f"bad-{i}", StringType(), useArrow=False)
    failing = spark.range(0, 300, 1, 3).select(boom("id").alias("payload"))
    with pytest.raises(Exception, match="ZeroDivisionError"):
        failing.write.format("stalkd").mode("append").save(str(path))
    assert len(_payloads(path)) == 301
    # A task still running when the job aborted removes its own staged file once it sees the
    # abort mark; poll for that (with a deadline) instead of assuming it already happened.
    deadline = time.monotonic() + 60
    while any(n.endswith((".frames", ".tmp")) for n in os.listdir(path / "_spark_staging")):
        assert time.monotonic() < deadline, os.listdir(path / "_spark_staging")
        time.sleep(0.05)
    assert len(_payloads(path)) == 301

    with pytest.raises(Exception, match="append-only"):
        df.write.format("stalkd").mode("overwrite").save(str(path))


def _stage(tmp: Path, name: str, rows: list[bytes]) -> Staged:
    f = tmp / name
    f.write_bytes(b"".join(len(r).to_bytes(4, "little") + r for r in rows))
    return Staged(0, str(f), len(rows))


def test_stream_commit_is_idempotent_per_batch_even_after_a_partial_append(tmp_path: Path) -> None:
    path = tmp_path / "log"
    os.makedirs(path)
    rows0 = [b"a0", b"a1", b"a2"]
    rows1 = [b"b0", b"b1", b"b2", b"b3", b"b4"]
    w = LogDirStreamWriter(str(path), "payload", "never")
    w.commit([_stage(tmp_path, "s0", rows0)], 0)
    w.commit([_stage(tmp_path, "s0", rows0)], 0)  # Spark replays batch 0: no duplicates
    # A crash in the middle of batch 1's write left its marker and two of its five rows.
    with Log.open(path, durability="never") as log:
        log.append_many([marker(1, 5), b"b0", b"b1"])
    w.commit([_stage(tmp_path, "s1", rows1)], 1)
    w.commit([_stage(tmp_path, "s1", rows1)], 1)
    w.commit([_stage(tmp_path, "s0", rows0)], 0)  # an old batch replayed late: ignored
    data = [p for p in _payloads(path) if not is_marker(p)]
    assert data == rows0 + rows1
    assert sum(1 for p in _payloads(path) if is_marker(p)) == 2


def test_stream_to_log_replays_without_duplicates_and_hides_markers(spark: Any, tmp_path: Path) -> None:
    src, dst, ck = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    with Log.open(src, durability="never") as log:
        log.append_many(f"m{i}".encode() for i in range(30))
    os.makedirs(dst)

    def run() -> None:
        q = (spark.readStream.format("stalkd").option("maxRecordsPerTrigger", "12").load(str(src))
             .select("payload").writeStream.format("stalkd").option("checkpointLocation", str(ck))
             .option("durability", "never").trigger(availableNow=True).start(str(dst)))  # fmt: skip
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    # Forget that the last batch was committed: Spark replays it into the sink on restart.
    commits = sorted(int(n) for n in os.listdir(ck / "commits") if n.isdigit())
    os.unlink(ck / "commits" / str(commits[-1]))
    (ck / "commits" / f".{commits[-1]}.crc").unlink(missing_ok=True)
    run()
    assert [p for p in _payloads(dst) if not is_marker(p)] == [f"m{i}".encode() for i in range(30)]
    assert sum(1 for p in _payloads(dst) if is_marker(p)) == 3  # batches of 12, 12, 6; the replay added none
    seen = spark.read.format("stalkd").load(str(dst)).select("payload").collect()
    assert sorted(bytes(r.payload) for r in seen) == sorted(f"m{i}".encode() for i in range(30))


def _beanstalk(address: str, *commands: bytes) -> list[bytes]:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        f = s.makefile("rb")
        out = []
        for c in commands:
            s.sendall(c)
            line = f.readline()
            out.append(line)
            if line.startswith((b"OK ", b"RESERVED ")):
                n = int(line.split()[-1])
                out.append(f.read(n + 2)[:-2])
        return out


def test_server_write_puts_rows_as_jobs_with_tube_and_priority_columns(spark: Any, queue_server: Any) -> None:
    beanstalkd = queue_server
    schema = StructType([StructField("body", BinaryType()), StructField("tube", StringType()),
                         StructField("priority", LongType())])
    rows = [(f"job-{i}".encode(), "even" if i % 2 == 0 else "odd", i) for i in range(200)]
    df = spark.createDataFrame(rows, schema).repartition(2)
    (df.write.format("stalkd").mode("append").option("server", beanstalkd.address)
       .option("ttr", "30").option("putWindow", "16").save())  # fmt: skip
    even = _beanstalk(beanstalkd.address, b"stats-tube even\r\n")[1]
    odd = _beanstalk(beanstalkd.address, b"stats-tube odd\r\n")[1]
    assert b"current-jobs-ready: 100\n" in even and b"current-jobs-ready: 100\n" in odd
    # the most urgent even job is priority 0: job-0, put with ttr 30
    got = _beanstalk(beanstalkd.address, b"watch even\r\n", b"reserve-with-timeout 0\r\n")
    assert got[2] == b"job-0"
    jid = got[1].split()[1]
    stats = _beanstalk(beanstalkd.address, b"stats-job " + jid + b"\r\n")[1]
    assert b"ttr: 30\n" in stats and b"pri: 0\n" in stats
