"""``spark_bench.py --cluster``: the ``stalkd`` source on a two-worker standalone cluster, reading
the archive from an S3 API server, against local[2] reading local disk, in one run.

Peers started by this script, on loopback, stopped by PID at the end (the helpers of
``tests/spark/cluster.py``): moto's S3 server, a standalone master and two one-core workers.
Each configuration runs in a driver process of its own (one SparkContext per process), warms
up with one full scan, then takes the best of ``--rounds`` scans (``write.format("noop")``):

  cluster 1 worker   S3 archive   (spark.cores.max=1: one executor)
  cluster 2 workers  S3 archive
  cluster 2 workers  local archive directory (the same compact segments, on local disk)
  local[2]           the server's log on local disk
  local[2]           spark.read.parquet of the same rows on local disk

Spark's own Parquet reader cannot read ``s3://`` here: that needs the hadoop-aws jars, which the
pip pyspark does not ship; so the Parquet peer reads local disk.

    .venv/bin/python bench/spark_bench.py --cluster --records 2000000

Targets (issue 16): the cluster read scales >= 1.6x from one worker to two; the read from the
S3 endpoint is >= 0.5x the local[2] read from local disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "spark"))  # the peers' start/stop helpers


def driver(master: str, cores: int, path: str, fmt: str, rounds: int, partitions: int) -> None:
    """One configuration, in this process: prints {"best": s, "rows": n, "partitions": p} as JSON."""
    from stalkd.spark.session import build_session

    extra = {"spark.driver.memory": "1g"}
    if master.startswith("spark://"):
        extra |= {"spark.executor.memory": "1g", "spark.executor.cores": "1", "spark.cores.max": str(cores)}
    spark = build_session(master, app="stalkd-cluster-bench", extra=extra)
    try:
        tracker = spark.sparkContext.statusTracker()
        if master.startswith("spark://"):
            while len(tracker.getExecutorInfos()) < cores + 1:
                time.sleep(0.1)

        def frame():  # type: ignore[no-untyped-def]
            if fmt == "parquet":
                return spark.read.parquet(path)
            return spark.read.format("stalkd").option("partitions", str(partitions)).load(path)

        rows = frame().count()
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            frame().write.format("noop").mode("overwrite").save()
            times.append(time.perf_counter() - t)
        print(json.dumps({"best": min(times), "rows": rows, "partitions": frame().rdd.getNumPartitions()}))
    finally:
        spark.stop()


def _run(master: str, cores: int, path: str, fmt: str, rounds: int, partitions: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--driver", master, str(cores), path, fmt, str(rounds),
                          str(partitions)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-4000:])
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main_cluster(records: int, rounds: int, keep: str | None) -> int:
    from cluster import start_s3, start_spark_cluster
    from spark_bench import write_inputs

    from stalkd.archive.shipper import Shipper
    from stalkd.archive.store import Store

    root = Path(keep or tempfile.mkdtemp(prefix="stalkd-cluster-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    s3 = start_s3(root / "s3")
    os.environ.update(s3.env)
    cluster = None
    try:
        print(f"generating {records:,} WAL records in {root}", flush=True)
        # 4 MiB segments (the server's default -s): enough slices to spread over two executors
        paths = write_inputs(records, root / "data", with_peers=False, segment_size=4 * 2**20)
        s3.create_bucket("bench")
        t = time.perf_counter()
        n = Shipper(str(root / "data"), Store.open("s3://bench/q")).ship_once()
        print(f"  shipped {n} segments to S3 in {time.perf_counter() - t:.1f} s", flush=True)
        Shipper(str(root / "data"), Store.open(str(root / "archive"))).ship_once()
        # the same raw rows as Parquet (local[2] writes them once)
        from stalkd.spark.session import build_session

        cluster = start_spark_cluster(root / "spark", workers=2)
        print(f"cluster {cluster.url} with 2 workers", flush=True)
        spark = build_session("local[2]", app="stalkd-bench-prep")
        spark.read.format("stalkd").load(str(paths["wal"])).write.mode("overwrite").parquet(str(root / "parquet"))
        spark.stop()
        cases = {
            "cluster 1 worker  S3": (cluster.url, 1, "s3://bench/q", "stalkd"),
            "cluster 2 workers S3": (cluster.url, 2, "s3://bench/q", "stalkd"),
            "cluster 2 workers dir": (cluster.url, 2, str(root / "archive"), "stalkd"),
            "local[2] local log": ("local[2]", 2, str(paths["wal"]), "stalkd"),
            "local[2] parquet": ("local[2]", 2, str(root / "parquet"), "parquet"),
        }
        res = {}
        for name, (master, cores, path, fmt) in cases.items():
            r = _run(master, cores, path, fmt, rounds, 8)
            res[name] = r["rows"] / r["best"]  # the archive lacks the active segment's rows
            print(f"  {name:<24} {res[name]:>12,.0f} rows/s  (best of {rounds}, {r['partitions']:.0f} partitions, "
                  f"{r['rows']:,.0f} rows)", flush=True)
        scale = res["cluster 2 workers S3"] / res["cluster 1 worker  S3"]
        s3_vs_local = res["cluster 2 workers S3"] / res["local[2] local log"]
        print("ratios (same run):")
        print(f"  2 workers / 1 worker (S3)        {scale:.2f}x  (target >= 1.6x)")
        print(f"  cluster S3 / local[2] local disk {s3_vs_local:.2f}x  (target >= 0.5x)")
        print(f"  cluster dir / cluster S3         {res['cluster 2 workers dir'] / res['cluster 2 workers S3']:.2f}x")
        print(f"  local log / local parquet        {res['local[2] local log'] / res['local[2] parquet']:.2f}x")
    finally:
        if cluster is not None:
            cluster.stop()
        s3.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--driver"]:
        m, c, p, f, r, parts = sys.argv[2:8]
        driver(m, int(c), p, f, int(r), int(parts))
    else:
        raise SystemExit("run through bench/spark_bench.py --cluster")
