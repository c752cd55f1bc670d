"""The pipeline on a real standalone cluster (one master, two worker JVMs on loopback) reading
history shipped to a real S3 API server (moto): partitions run on both workers, results equal
local[2]'s, a server under load ships every put exactly once, and a kill -9 while shipping
leaves nothing a reader takes for a segment."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import greenstalk
import pyarrow.parquet as pq
import pytest
from pyspark.testing import assertDataFrameEqual

from server.proc import start_stalkd
from stalkd.archive.remote import fetch_segment, load_manifest
from stalkd.archive.shipper import Shipper
from stalkd.archive.store import Store
from stalkd.log import Log, LogReader
from stalkd.log.errors import NotALogError
from support import wait_until

# Starting the cluster's JVMs counts against the first test's timeout; on a loaded 2-core machine
# that alone can take minutes.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def bucket(s3_server: Any) -> Any:
    """Make a bucket on the S3 server (once per name)."""
    return s3_server.create_bucket


def _payload(i: int) -> bytes:
    return f"frame-{i:06d}-".encode() + bytes([i % 251]) * (i % 90)


def _local_rows(spark: Any, path: str, *options: str) -> list[list[Any]]:
    reader = spark.read.format("stalkd")
    for o in options:
        reader = reader.option(*o.split("=", 1))
    return [[r.offset, r.payload.hex()] for r in reader.load(path).select("offset", "payload").collect()]


def test_cluster_reads_the_archive_on_both_workers_and_equals_local(spark: Any, cluster_driver: Any,
                                                                     tmp_path: Path, bucket: Any) -> None:
    # Given a server-style data dir whose sealed segments were shipped to S3
    data = tmp_path / "data"
    with Log.open(data / "wal", segment_size=8192, durability="never") as log:
        log.append_many(_payload(i) for i in range(1000))
    bucket("history")
    shipper = Shipper(str(data), Store.open("s3://history/q1"))
    assert shipper.ship_once() >= 8
    end = shipper.shipped_end()

    # When the cluster reads the archive URL (4 partitions over 2 one-core executors)
    got = cluster_driver.request(tmp_path / "s3.json", read="s3://history/q1", options=["partitions=4"])

    # Then both workers' executors ran the source's partitions, and rows equal local[2]'s read
    # of the same offsets from local disk (given the data dir, as people type it)
    assert got["partitions"] == 4
    assert len(got["executors"]) == 2, got["executors"]
    local = _local_rows(spark, str(data), f"endOffset={end}")
    assert [r[0] for r in local] == list(range(end))
    assertDataFrameEqual(got["rows"], local)
    # The same on local[2] from the archive URL, with a time bound pruning whole segments
    assertDataFrameEqual(_local_rows(spark, "s3://history/q1"), local)


def test_data_dir_without_a_log_is_an_error_not_zero_rows(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "wal").mkdir()
    with pytest.raises(Exception, match="no stalkd log here"):
        spark.read.format("stalkd").load(str(tmp_path)).count()
    with pytest.raises(NotALogError, match="no stalkd archive"):
        load_manifest(Store.open("s3://history/nothing-here"))


def test_data_dir_reads_the_history_retention_deleted_after_shipping(spark: Any, tmp_path: Path,
                                                                     bucket: Any) -> None:
    bucket("shipped")
    data = tmp_path / "data"
    with Log.open(data / "wal", segment_size=8192, durability="never") as log:
        log.append_many(_payload(i) for i in range(400))
        shipper = Shipper(str(data), Store.open("s3://shipped/q"))
        log.retention_hold = shipper.shipped_end
        shipper.ship_once()
        assert log.retain(10**9)  # shipped, so deleted locally
        log.append_many(_payload(i) for i in range(400, 450))
    assert _local_rows(spark, str(data))[0][0] > 0  # the local log alone misses the start
    (data / "archive.url").write_text("s3://shipped/q\n")  # what `stalkd serve --archive URL` leaves
    assert _local_rows(spark, str(data)) == [[i, _payload(i).hex()] for i in range(450)]
    assert _local_rows(spark, str(data), "archive=false")[0][0] > 0


def _put_all(address: tuple[str, int], tube: str, bodies: list[str], threads: int = 4) -> None:
    def run(chunk: list[str]) -> None:
        with greenstalk.Client(address, use=tube) as c:
            for b in chunk:
                c.put(b)

    ts = [threading.Thread(target=run, args=(bodies[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def _log_end(wal: Path) -> int:
    with LogReader(wal) as r:
        return max((f.offset + 1 for f in r.read(0)), default=0)


def test_server_ships_under_load_and_the_cluster_reads_every_put_once(spark: Any, cluster_driver: Any,
                                                                     tmp_path: Path, bucket: Any) -> None:
    bucket("live")
    data = tmp_path / "data"
    server = start_stalkd("-b", str(data), "-F", "-s", "16384", "--archive", "s3://live/queue")
    store = Store.open("s3://live/queue")
    try:
        # Given puts from four connections at once, while the shipper ships segments
        bodies = [f"job-{i:05d}-" + "x" * (i % 200) for i in range(600)]
        _put_all((server.host, server.port), "tracked", bodies)
        end = _log_end(data / "wal")
        # Filler puts seal the segment holding the last tracked put
        with greenstalk.Client((server.host, server.port), use="filler") as c:
            def shipped() -> bool:
                c.put("f" * 500)
                try:
                    return load_manifest(store).end >= end
                except NotALogError:
                    return False
            wait_until(shipped, "the segments holding every tracked put are shipped", 120)
    finally:
        server.stop()
    manifest = load_manifest(store)
    assert len(manifest.segments) >= 4
    assert [s.base for s in manifest.segments] == [0] + [s.end for s in manifest.segments[:-1]]
    assert (data / "archive.url").read_text().strip() == "s3://live/queue"
    # When the cluster reads the archive URL record by record, with the bodies
    got = cluster_driver.request(tmp_path / "wal.json", read="s3://live/queue",
                                 options=["records=wal", "body=true"])
    # Then every tracked put is there exactly once
    puts = [bytes.fromhex(body).decode() for _o, op, tube, body in got["rows"] if (op, tube) == ("put", "tracked")]
    assert Counter(puts) == Counter(bodies)
    # And `stalkd analyze URL` on the cluster's session writes tables counting each put once to a URL
    bucket("reports")
    done = cluster_driver.request(tmp_path / "analyze.json",
                                  analyze=["s3://live/queue", "--out", "s3://reports/run1", "--no-progress"])
    assert done["code"] == 0
    reports = Store.open("s3://reports/run1")
    assert b"<html" in reports.read("report.html").lower()
    tubes = pq.ParquetDataset("reports/run1/tubes", filesystem=reports.fs).read().to_pylist()
    tracked = {t["tube"]: t for t in tubes}["tracked"]
    assert (tracked["puts"], tracked["jobs"]) == (len(bodies), len(bodies))


@pytest.mark.parametrize("where", ["s3", "dir"])
def test_kill_9_while_shipping_leaves_nothing_a_reader_takes_for_a_segment(spark: Any, tmp_path: Path,
                                                                          where: str, bucket: Any) -> None:
    if where == "s3":
        bucket("crash")
        url = "s3://crash/q"
    else:
        url = str(tmp_path / "archive")
    data = tmp_path / "data"
    stop = threading.Event()
    server = start_stalkd("-b", str(data), "-F", "-s", "8192", "--archive", url)
    store = Store.open(url)

    def load() -> None:
        i = 0
        try:
            with greenstalk.Client((server.host, server.port), use="load") as c:
                while not stop.is_set():
                    c.put(f"load-{i}-" + "y" * 300)
                    i += 1
        except (OSError, greenstalk.Error):
            pass  # the server was killed under us

    loader = threading.Thread(target=load)
    loader.start()
    try:
        # Given segments being sealed and shipped continuously
        def some_shipped() -> bool:
            try:
                return len(load_manifest(store).segments) >= 4
            except NotALogError:
                return False
        wait_until(some_shipped, "four segments shipped", 120)
        # When the server is killed mid-stream
        server.kill9()
    finally:
        stop.set()
        loader.join()
        server.stop()

    # Then every segment the manifest names is whole (size, CRC, offsets) ...
    manifest = load_manifest(store)
    for e in manifest.segments:
        fetch_segment(store, e).close()
    # ... and the source reads exactly the shipped offsets, ignoring anything unpublished
    got = _local_rows(spark, url)
    assert [r[0] for r in got] == list(range(manifest.end))

    # And a restarted server goes on shipping after them, without a gap or an overlap
    before = manifest.end
    server = start_stalkd("-b", str(data), "-F", "-s", "8192", "--archive", url)
    try:
        with greenstalk.Client((server.host, server.port), use="more") as c:
            def more() -> bool:
                c.put("z" * 400)
                return load_manifest(store).end > before + 50
            wait_until(more, "shipping resumed after the restart", 120)
    finally:
        server.stop()
    segs = load_manifest(store).segments
    assert [s.base for s in segs] == [0] + [s.end for s in segs[:-1]]
    assert [r[0] for r in _local_rows(spark, url)] == list(range(segs[-1].end))


def test_stream_over_the_archive_as_segments_arrive_and_restart(spark: Any, tmp_path: Path, bucket: Any) -> None:
    data, out, ck = tmp_path / "data", tmp_path / "out", tmp_path / "ck"
    bucket("stream")
    shipper = Shipper(str(data), Store.open("s3://stream/q"))

    def run_available_now() -> list[int]:
        q = (spark.readStream.format("stalkd").option("maxRecordsPerTrigger", "100").load("s3://stream/q")
             .writeStream.format("parquet").option("checkpointLocation", str(ck))
             .trigger(availableNow=True).start(str(out)))  # fmt: skip
        q.awaitTermination(180)
        assert q.exception() is None
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    # Given an archive with the first segments shipped
    with Log.open(data / "wal", segment_size=8192, durability="never") as log:
        log.append_many(_payload(i) for i in range(250))
        shipper.ship_once()
        first = shipper.shipped_end()
        assert 0 < first < 250
        assert sum(run_available_now()) == first
        # When more segments arrive while the query is stopped
        log.append_many(_payload(i) for i in range(250, 600))
        shipper.ship_once()
    second = shipper.shipped_end()
    assert second > 250
    # Then the restart from the checkpoint reads exactly the new ones
    assert sum(run_available_now()) == second - first
    got = spark.read.parquet(str(out)).select("offset", "payload").collect()
    assert sorted((r.offset, bytes(r.payload)) for r in got) == [(i, _payload(i)) for i in range(second)]
