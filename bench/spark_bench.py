"""Spark pipeline benchmark: read rows/s of the ``stalkd`` source against Spark's own readers.

One run writes N WAL records (a put / reserve / delete-or-release-or-bury mix over a few tubes)
into a stalkd log, and the same records, decoded, as JSON lines and as Parquet. Then on
``local[2]`` it times a full scan of each (``write.format("noop")``) and the analytics job, and
prints rows/s and ratios against the peers measured in the same run.

    .venv/bin/python bench/spark_bench.py                 # 1M records
    .venv/bin/python bench/spark_bench.py --records 200000 --skip-analytics
    .venv/bin/python bench/spark_bench.py --skip-analytics --keep /tmp/sb   # reuse inputs next run
    STALKD_BENCH_10M=1 .venv/bin/python bench/spark_bench.py   # also analytics on 10M records
    .venv/bin/python bench/spark_bench.py --cluster --records 2000000   # see spark_cluster_bench.py

Targets (issue 6): raw read >= 500k rows/s and >= 1x spark.read.json of the same data.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from stalkd.engine.model import Op, Record, encode

TUBES = ("emails", "images", "reports", "webhooks")


def records(n: int, seed: int = 7) -> Iterator[Record]:
    """A plausible WAL: jobs put, reserved, then mostly deleted; some released or buried."""
    rng = random.Random(seed)
    t = 1_700_000_000_000_000
    seq = 0
    job = 0
    live: list[tuple[int, str]] = []
    while seq < n:
        t += rng.randint(50, 400)
        seq += 1
        if not live or (len(live) < 500 and rng.random() < 0.45):
            job += 1
            tube = TUBES[job % len(TUBES)]
            live.append((job, tube))
            yield Record(Op.PUT, seq, t, job, tube=tube, pri=1024, ttr=60, body=b"x" * rng.randint(16, 200),
                         created_us=t)
            continue
        j, tube = live[rng.randrange(len(live))]
        yield Record(Op.RESERVE, seq, t, j)
        if seq >= n:
            break
        seq += 1
        t += rng.randint(100, 5000)
        r = rng.random()
        if r < 0.85:
            live.remove((j, tube))
            yield Record(Op.DELETE, seq, t, j)
        elif r < 0.97:
            yield Record(Op.RELEASE, seq, t, j, pri=1024)
        else:
            live.remove((j, tube))
            yield Record(Op.BURY, seq, t, j, pri=1024)


def write_inputs(n: int, root: Path, *, with_peers: bool = True, segment_size: int = 16 * 2**20) -> dict[str, Path]:
    """The log, and (``with_peers``) JSON lines and Parquet holding the same n records."""
    import pyarrow.parquet as pq

    from stalkd.log import Log
    from stalkd.spark.batches import wal_batch

    log_dir, json_dir, pq_dir = root / "wal", root / "json", root / "parquet"
    json_dir.mkdir(parents=True)
    pq_dir.mkdir()
    pq_writer = None
    offset = 0
    # 16 MiB segments, as the server's WAL writes them (stalkd.persist.wal's default).
    with Log.open(log_dir, segment_size=segment_size, durability="never") as log, \
            open(json_dir / "records.json", "w") as jf:
        chunk: list[bytes] = []
        gen = records(n)
        while True:
            chunk = [encode(r) for _, r in zip(range(65536), gen, strict=False)]
            if not chunk:
                break
            log.append_many(chunk)
            if with_peers:
                batch = wal_batch(range(offset, offset + len(chunk)), chunk)
                if pq_writer is None:
                    pq_writer = pq.ParquetWriter(pq_dir / "records.parquet", batch.schema)
                pq_writer.write_batch(batch)
                for row in batch.to_pylist():
                    row["time"] = round(row["time"].timestamp() * 1_000_000)
                    row["deadline"] = None
                    row["created"] = row["created"] and round(row["created"].timestamp() * 1_000_000)
                    jf.write(json.dumps(row) + "\n")
            offset += len(chunk)
    if pq_writer is not None:
        pq_writer.close()
    return {"wal": log_dir, "json": json_dir, "parquet": pq_dir}


def _tree_cpu() -> float:
    """CPU seconds used so far by this process's live descendants (the Spark JVM and its Python
    workers); 0 where /proc is missing. Less sensitive than wall time to a busy machine."""
    tck = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    kids: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        kids.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tck
    total, todo = 0.0, list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += kids.get(pid, [])
    return total


def _timed(label: str, action) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    c, t = _tree_cpu(), time.perf_counter()
    action()
    dt, dc = time.perf_counter() - t, _tree_cpu() - c
    print(f"  {label:<22} {dt:7.2f} s wall {dc:7.2f} s cpu", flush=True)
    return dt, dc


def _inputs(n: int, root: Path) -> dict[str, Path]:
    """The inputs in ``root``, generated unless a previous run with the same n left them there."""
    done = root / "done"
    paths = {"wal": root / "wal", "json": root / "json", "parquet": root / "parquet"}
    if done.exists() and done.read_text() == str(n):
        print(f"reusing {n:,} WAL records (log + JSON + Parquet) in {root}", flush=True)
        return paths
    shutil.rmtree(root, ignore_errors=True)
    print(f"generating {n:,} WAL records (log + JSON + Parquet) in {root}", flush=True)
    t = time.perf_counter()
    paths = write_inputs(n, root)
    done.write_text(str(n))
    print(f"  generated in {time.perf_counter() - t:.1f} s", flush=True)
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=int(os.environ.get("STALKD_BENCH_RECORDS", 1_000_000)))
    ap.add_argument("--rounds", type=int, default=3, help="timed scans per reader (best counts)")
    ap.add_argument("--skip-analytics", action="store_true")
    ap.add_argument("--keep", help="keep the generated inputs in this directory (and reuse them next time)")
    ap.add_argument("--cluster", action="store_true",
                    help="two-worker standalone cluster reading the archive from S3 (spark_cluster_bench.py)")
    args = ap.parse_args()
    if args.cluster:
        from spark_cluster_bench import main_cluster

        return main_cluster(args.records, args.rounds, args.keep)
    root = Path(args.keep or tempfile.mkdtemp(prefix="stalkd-spark-bench-"))
    n = args.records
    paths = _inputs(n, root)

    from stalkd.spark.session import build_session

    spark = build_session("local[2]", app="stalkd-bench", extra={"spark.driver.memory": "2g"})
    try:
        def scan(df):  # type: ignore[no-untyped-def]
            return lambda: df.write.format("noop").mode("overwrite").save()

        src = spark.read.format("stalkd")
        cases = {
            "stalkd raw": lambda: src.load(str(paths["wal"])),
            "stalkd records=wal": lambda: src.option("records", "wal").load(str(paths["wal"])),
            "spark.read.json": lambda: spark.read.schema(_json_schema()).json(str(paths["json"])),
            "spark.read.parquet": lambda: spark.read.parquet(str(paths["parquet"])),
        }
        parts = {name: make().rdd.getNumPartitions() for name, make in cases.items()}
        # Every reader gets one untimed full scan first (JIT warm-up, Python workers, file
        # caches), then the readers take turns, so a noisy moment hits them all alike.
        print(f"warm-up: one full scan of {n:,} rows per reader on local[2]:")
        for name, make in cases.items():
            _timed(name, scan(make()))
        print(f"timed: {args.rounds} rounds, readers in turn:")
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, make in cases.items():
                runs[name].append(_timed(name, scan(make())))
        results = {name: n / min(w for w, _ in r) for name, r in runs.items()}
        cpu_us = {name: min(c for _, c in r) / n * 1e6 for name, r in runs.items()}
        print(f"\nbest of {args.rounds} ({n:,} rows; cpu = JVM + Python workers, core-us per row, lowest):")
        for name, rate in results.items():
            print(f"  {name:<22} {rate:>12,.0f} rows/s  {cpu_us[name]:5.2f} cpu-us/row  {parts[name]} partitions")
        print("ratios:")
        print(f"  raw / json     {results['stalkd raw'] / results['spark.read.json']:.2f}x  (target >= 1x)")
        print(f"  raw / parquet  {results['stalkd raw'] / results['spark.read.parquet']:.2f}x")
        print(f"  wal / json     {results['stalkd records=wal'] / results['spark.read.json']:.2f}x")
        print(f"  raw >= 500k rows/s: {'yes' if results['stalkd raw'] >= 500_000 else 'NO'}")

        if not args.skip_analytics:
            from stalkd.spark.pipeline import run_analysis

            res = run_analysis(spark, str(paths["wal"]), root / "analysis", progress=False)
            print(f"\nanalytics on {res.records:,} records ({res.jobs:,} jobs): {res.seconds:.1f} s wall")
            if os.environ.get("STALKD_BENCH_10M"):
                big = root / "big"
                shutil.rmtree(big, ignore_errors=True)
                shutil.rmtree(paths["json"])
                (root / "done").unlink(missing_ok=True)
                write_big = write_inputs(10_000_000, big, with_peers=False)
                res = run_analysis(spark, str(write_big["wal"]), big / "analysis", progress=False)
                print(f"analytics on {res.records:,} records ({res.jobs:,} jobs): {res.seconds:.1f} s wall")
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def _json_schema():  # type: ignore[no-untyped-def]
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    cols = [("offset", LongType()), ("seq", LongType()), ("time", LongType()), ("op", StringType()),
            ("job_id", LongType()), ("tube", StringType()), ("priority", LongType()), ("delay", LongType()),
            ("ttr", LongType()), ("deadline", LongType()), ("state", StringType()), ("created", LongType()),
            ("body_size", LongType())]
    return StructType([StructField(c, t) for c, t in cols])


if __name__ == "__main__":
    raise SystemExit(main())
