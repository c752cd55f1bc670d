"""A driver run as its own process against a standalone master (the test process keeps its
local[2] session), serving requests one at a time, so every cluster test shares one application
(its driver JVM and the executors on both workers start once per test session).

    python cluster_job.py MASTER [--executors N]

Once the executors registered it prints ``READY``. Then each line on stdin is a JSON request,
answered by writing JSON to the request's ``out`` file and printing ``DONE <id>`` (stdout
carries nothing else the test reads: Spark and the analysis print there too):

- ``{"id", "out", "read": PATH, "options": [KEY=VALUE, ...]}``: read a ``stalkd`` source; the
  answer holds ``rows`` ([offset, payload hex] of the raw read, or [offset, op, tube, body hex]
  with records=wal), ``partitions`` (the source's partition count) and ``executors`` (the
  executor ids that ran the read's tasks, from the driver's own REST API);
- ``{"id", "out", "analyze": [ARGS...]}``: ``stalkd analyze ARGS`` on this driver's session;
  the answer holds its exit ``code``.

A request that fails is answered with its ``error`` (the traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import traceback
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


def _read(spark: Any, path: str, options: list[str]) -> dict[str, Any]:
    reader = spark.read.format("stalkd")
    opts = dict(o.split("=", 1) for o in options)
    for k, v in opts.items():
        reader = reader.option(k, v)
    df = reader.load(path)
    parts = df.rdd.getNumPartitions()
    if opts.get("records") == "wal":
        rows = [[r.offset, r.op, r.tube, r.body.hex() if r.body is not None else None]
                for r in df.select("offset", "op", "tube", "body").collect()]
    else:
        rows = [[r.offset, r.payload.hex()] for r in df.select("offset", "payload").collect()]
    return {"rows": rows, "partitions": parts, "executors": _executors_of_read(spark, parts)}


def _answer(spark: Any, req: dict[str, Any]) -> dict[str, Any]:
    try:
        if "analyze" in req:
            from stalkd.spark.cli import analyze

            # The active session is this one: analyze uses it and leaves it running.
            with contextlib.redirect_stdout(sys.stderr):
                return {"code": analyze(req["analyze"])}
        return _read(spark, req["read"], req.get("options", []))
    except Exception:
        return {"error": traceback.format_exc()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("master")
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
        print("READY", flush=True)
        for line in sys.stdin:
            req = json.loads(line)
            with open(req["out"], "w") as f:
                json.dump(_answer(spark, req), f)
            print(f"DONE {req['id']}", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
