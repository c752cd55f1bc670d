"""The ``stalkd`` source reads exactly what the log's own reader sees: rolls, archive, torn tail,
decoded WAL records, offset pruning, and streaming across appends and a checkpoint restart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from stalkd.engine.model import Op, Record, decode, encode
from stalkd.log import Log, LogReader

pytestmark = pytest.mark.spark

SEGMENT = 4096  # small segments: a few dozen frames each, so the tests cross many rolls


def _payload(i: int) -> bytes:
    return f"job-{i:05d}-".encode() + bytes([i % 251]) * (i % 40)


def _reader_rows(path: Path, archive: Any = True, start: int = 0) -> list[Row]:
    with LogReader(path, archive=archive) as r:
        return [Row(offset=f.offset, timestamp_us=f.timestamp_us, payload=f.bytes()) for f in r.read(start)]


def _spark_rows(df: Any) -> list[Row]:
    # timestamps back to integer microseconds, so the comparison does not depend on time zones
    from pyspark.sql import functions as F

    return df.select("offset", F.unix_micros("timestamp").alias("timestamp_us"), "payload").collect()


@pytest.fixture(scope="module")
def archived_log(tmp_path_factory: Any) -> tuple[Path, int]:
    """400 frames over many segments; the oldest sealed ones moved to archive/; a torn tail."""
    path = tmp_path_factory.mktemp("log")
    with Log.open(path, segment_size=SEGMENT, durability="never", archive=True) as log:
        log.append_many(_payload(i) for i in range(400))
        moved = log.retain(150)
        assert moved and all("archive" in m for m in moved)
        base, pos = log.position_of_end()
        log.append(b"torn-frame-payload")
    # Tear the last frame: corrupt a payload byte so its CRC no longer matches.
    seg = next(s.path for s in LogReader(path).segments() if s.base_offset == base)
    with open(seg, "r+b") as f:
        f.seek(pos + 30)
        byte = f.read(1)
        f.seek(pos + 30)
        f.write(bytes([byte[0] ^ 0xFF]))
    return path, 400


def test_batch_read_equals_log_reader_across_rolls_archive_and_torn_tail(spark: Any, archived_log: Any) -> None:
    path, n = archived_log
    expected = _reader_rows(path)
    assert [r.offset for r in expected] == list(range(n))  # the torn frame is not visible
    assert [r.payload for r in expected] == [_payload(i) for i in range(n)]
    segments = LogReader(path).segments()
    assert len(segments) > 5 and any(s.archived for s in segments)
    # Default (one partition per core), one per segment, and segments grouped three ways.
    for parts, want in ((None, None), ("1000", len(segments)), ("3", 3)):
        reader = spark.read.format("stalkd")
        df = (reader if parts is None else reader.option("partitions", parts)).load(str(path))
        if want is not None:
            assert df.rdd.getNumPartitions() == want
        assertDataFrameEqual(_spark_rows(df), expected)

    for mode in ("false", "only"):
        view = _reader_rows(path, archive={"false": False, "only": "only"}[mode])
        got = _spark_rows(spark.read.format("stalkd").option("archive", mode).load(str(path)))
        assertDataFrameEqual(got, view)
        assert 0 < len(got) < n


def test_split_slices_and_offset_pruning(spark: Any, archived_log: Any) -> None:
    path, n = archived_log
    base = spark.read.format("stalkd").option("maxRecordsPerPartition", "7").option("pushdown", "true")
    df = base.load(str(path))
    sealed = sum(1 for s in LogReader(path).segments() if s.sealed)
    assert df.rdd.getNumPartitions() > sealed + 1  # large segments were split
    pruned = df.where("offset >= 390 AND offset < 395")
    assert pruned.rdd.getNumPartitions() == 1  # pushed down: only one slice is read
    assert [r.offset for r in pruned.collect()] == [390, 391, 392, 393, 394]
    ranged = spark.read.format("stalkd").option("startOffset", "100").option("endOffset", "250").load(str(path))
    assertDataFrameEqual(_spark_rows(ranged), [r for r in _reader_rows(path) if 100 <= r.offset < 250])


def test_wal_records_decode_like_the_model(spark: Any, tmp_path: Path) -> None:
    records = []
    for j in range(1, 60):
        t = 1_700_000_000_000_000 + j * 1000
        records.append(Record(Op.PUT, 3 * j, t, j, tube=f"t{j % 3}", pri=j, delay=j % 2, ttr=30,
                              deadline_us=t + 10**6 if j % 2 else 0, body=b"b" * j, created_us=t))
        records.append(Record(Op.RESERVE, 3 * j + 1, t + 5, j))
        if j % 4 == 0:
            records.append(Record(Op.RELEASE, 3 * j + 2, t + 9, j, pri=7))
        else:
            records.append(Record(Op.DELETE, 3 * j + 2, t + 9, j))
    records.append(Record(Op.PAUSE, 1000, 1_700_000_100_000_000, 0, tube="t1", delay=5,
                          deadline_us=1_700_000_105_000_000))
    with Log.open(tmp_path, segment_size=SEGMENT, durability="never") as log:
        log.append_many(encode(r) for r in records)
    df = spark.read.format("stalkd").option("records", "wal").option("body", "true").load(str(tmp_path))
    rows = {r.offset: r for r in df.collect()}
    assert len(rows) == len(records)
    for off, rec in enumerate(records):
        with LogReader(tmp_path) as reader:
            frame = next(iter(reader.read(off, off + 1)))
        want = decode(frame.payload)
        assert want == rec
        got = rows[off]
        assert (got.seq, got.op, got.job_id) == (want.seq, want.op.name.lower(), want.job_id)
        assert round(got.time.timestamp() * 1e6) == want.time_us
        if want.op is Op.PUT:
            assert (got.tube, got.priority, got.delay, got.ttr, got.body, got.body_size) == (
                want.tube, want.pri, want.delay, want.ttr, want.body, len(want.body))
            assert (got.deadline is None) == (want.deadline_us == 0)
        elif want.op is Op.PAUSE:
            assert (got.tube, got.delay) == ("t1", 5)
        elif want.op is Op.RELEASE:
            assert got.priority == 7 and got.tube is None
        else:
            assert got.tube is None and got.body is None


def test_stream_across_appends_rate_limit_and_checkpoint_restart(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    out = tmp_path / "out"
    ck = tmp_path / "ck"
    with Log.open(path, segment_size=SEGMENT, durability="never") as log:
        log.append_many(_payload(i) for i in range(25))

    def run_available_now(per_trigger: int) -> Any:
        q = (spark.readStream.format("stalkd").option("maxRecordsPerTrigger", str(per_trigger)).load(str(path))
             .writeStream.format("parquet").option("checkpointLocation", str(ck))
             .trigger(availableNow=True).start(str(out)))  # fmt: skip
        q.awaitTermination(120)
        assert q.exception() is None
        return q.recentProgress

    progress = run_available_now(10)
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [10, 10, 5]
    # Appends while the query is stopped, crossing segment rolls; the restart reads exactly them.
    with Log.open(path, segment_size=SEGMENT, durability="never") as log:
        log.append_many(_payload(i) for i in range(25, 140))
    progress = run_available_now(50)
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [50, 50, 15]
    got = spark.read.parquet(str(out)).select("offset", "payload").collect()
    assert sorted((r.offset, bytes(r.payload)) for r in got) == [(i, _payload(i)) for i in range(140)]
    assert len(os.listdir(ck / "offsets")) >= 5


def test_auto_registration_empty_log_and_bad_options(spark: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    Log.open(empty, durability="never").close()
    # pyspark_stalkd's DefaultSource: a new session that never called register() finds it
    other = spark.newSession()
    assert other.read.format("stalkd").load(str(empty)).count() == 0
    with pytest.raises(Exception, match="records='bogus'"):
        spark.read.format("stalkd").option("records", "bogus").load(str(empty)).collect()
    with pytest.raises(Exception, match="missing: does not exist"):
        spark.read.format("stalkd").load(str(tmp_path / "missing")).collect()
    # a directory that holds no log: an error naming what was expected, never 0 rows
    (tmp_path / "data" / "wal").mkdir(parents=True)
    with pytest.raises(Exception, match="no stalkd log here"):
        spark.read.format("stalkd").load(str(tmp_path / "data")).collect()


def test_latest_offset_resumes_its_scan_instead_of_rereading_the_segment(tmp_path: Path) -> None:
    from stalkd.spark.source import ReadOptions, StalkdStreamReader

    with Log.open(tmp_path, segment_size=1 << 20, durability="never") as log:
        log.append_many(_payload(i) for i in range(500))
        reader = StalkdStreamReader(ReadOptions.parse({"path": str(tmp_path)}), {"maxRecordsPerTrigger": "100"})
        assert reader._end() == 500
        view, state = reader._tail  # type: ignore[misc]
        stopped_at = state.pos
        assert reader._end() == 500 and state.pos == stopped_at  # idle: nothing rescanned
        log.append_many(_payload(i) for i in range(500, 507))
        assert reader._end() == 507 and state.pos > stopped_at
        assert reader._tail[0] is view  # same mapping, resumed scan
        start = reader.initialOffset()
        assert start == {"offset": 0}
        from pyspark.sql.streaming.datasource import ReadMaxRows

        assert reader.latestOffset(start, ReadMaxRows(100)) == {"offset": 100}
        assert reader.latestOffset({"offset": 450}, ReadMaxRows(100)) == {"offset": 507}
