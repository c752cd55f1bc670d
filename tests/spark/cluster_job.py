"""A driver run as its own process against a standalone master (the test process keeps its
local[2] session): reads a ``stalkd`` source and writes what it saw as JSON.

    python cluster_job.py MASTER PATH OUT.json [--option KEY=VALUE ...]

Output: ``rows`` ([offset, payload hex] of the raw read, or [offset, op, tube, body hex] with
records=wal), ``partitions`` (the source's partition count) and ``executors`` (the executor ids
that ran the read's tasks, from the driver's own REST API).
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from typing import Any

from stalkd.spark.session import build_session


def _executors_of_read(spark: Any, tasks: int) -> list[str]:
    """Executor ids of the tasks of the last completed stage with ``tasks`` tasks."""
    sc = spark.sparkContext
    base = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"
    with urllib.request.urlopen(f"{base}/stages?status=complete&details=true", timeout=30) as r:
        stages = json.load(r)
    for stage in sorted(stages, key=lambda s: s["stageId"], reverse=True):
        if stage["numTasks"] == tasks:
            return sorted({t["executorId"] for t in stage.get("tasks", {}).values()})
    return []


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("master")
    p.add_argument("path")
    p.add_argument("out")
    p.add_argument("--option", action="append", default=[])
    p.add_argument("--executors", type=int, default=2)
    args = p.parse_args()
    spark = build_session(args.master, app="stalkd-cluster-test", tests=True, extra={
        "spark.ui.enabled": "true", "spark.ui.port": "0", "spark.executor.memory": "512m",
        "spark.executor.cores": "1", "spark.cores.max": str(args.executors), "spark.driver.memory": "512m",
        "spark.task.maxFailures": "1"})  # fmt: skip
    try:
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + 180
        # getExecutorInfos lists the driver too.
        while len(tracker.getExecutorInfos()) < args.executors + 1:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(tracker.getExecutorInfos()) - 1} executors registered")
            time.sleep(0.1)
        reader = spark.read.format("stalkd")
        opts = dict(o.split("=", 1) for o in args.option)
        for k, v in opts.items():
            reader = reader.option(k, v)
        df = reader.load(args.path)
        parts = df.rdd.getNumPartitions()
        if opts.get("records") == "wal":
            rows = [[r.offset, r.op, r.tube, r.body.hex() if r.body is not None else None]
                    for r in df.select("offset", "op", "tube", "body").collect()]
        else:
            rows = [[r.offset, r.payload.hex()] for r in df.select("offset", "payload").collect()]
        executors = _executors_of_read(spark, parts)
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "partitions": parts, "executors": executors}, f)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
