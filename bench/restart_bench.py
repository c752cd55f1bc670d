"""Restart with many live jobs: what recovery reads after a run of puts nobody took (issue 34).

One run of ``--jobs`` puts (100-byte bodies, the server's maintenance after every 1,000) is made
three ways, and each data directory is recovered ``--repeat`` times in a fresh process, the three
alternating (medians printed):

* ``wal only``: snapshots never due while every job is live (the trigger before: WAL since the
  last snapshot >= the live data, which puts alone never reach), so every put is replayed;
* ``trigger``: the snapshot trigger as it is (WAL since the last snapshot >= half the live data):
  the jobs come back mostly from snapshots, in bulk, plus a tail;
* ``snapshot``: the same with a final snapshot (a clean stop), the floor of what recovery costs.

    .venv/bin/python bench/restart_bench.py [--jobs 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Put

T0 = 1_700_000_000.0


def build(directory: str, n: int, snapshots: bool, final: bool) -> None:
    wal = Wal.open(directory, durability="never", background=False,
                   compact_min_bytes=None if snapshots else 1 << 62)  # fmt: skip
    e, _ = wal.recover(T0)
    e.connect(1, T0)
    body = b"x" * 100
    for i in range(n):
        wal.write(e.apply(1, Put(0, 0, 60, body), T0).records)
        if i % 1000 == 999:
            while wal.maintain(e, T0):
                pass
    if final:
        wal.snapshot(e)
    wal.abandon()


def child(directory: str) -> None:
    t = time.perf_counter()
    wal = Wal.open(directory, durability="never")
    _, info = wal.recover(T0 + 1)
    print(time.perf_counter() - t, info.jobs, info.snapshot_jobs, info.records_replayed)
    wal.abandon()


def timed(directory: str) -> tuple[float, int, int, int]:
    out = subprocess.run([sys.executable, __file__, "--child", directory], capture_output=True, text=True,
                         check=True, timeout=600).stdout.split()  # fmt: skip
    return float(out[0]), int(out[1]), int(out[2]), int(out[3])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=200_000, help="live jobs (default 200,000; the issue's target is 1M)")
    p.add_argument("--repeat", type=int, default=3, help="recoveries timed per data directory (default 3)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child)
        return 0
    root = tempfile.mkdtemp(prefix="restart-bench-", dir=os.environ.get("BENCH_DATA_DIR", "/var/tmp"))
    kinds = {"wal only": (False, False), "trigger": (True, False), "snapshot": (True, True)}
    try:
        for name, (snaps, final) in kinds.items():
            build(os.path.join(root, name.replace(" ", "-")), a.jobs, snaps, final)
        runs: dict[str, list[tuple[float, int, int, int]]] = {k: [] for k in kinds}
        for _ in range(a.repeat):
            for name in kinds:
                runs[name].append(timed(os.path.join(root, name.replace(" ", "-"))))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(r[0] for r in runs["wal only"])
    print(f"restart with {a.jobs:,} live jobs (medians of {a.repeat}, each in a fresh process)")
    for name, rs in runs.items():
        secs = statistics.median(r[0] for r in rs)
        _, jobs, from_snap, replayed = rs[0]
        print(f"  {name:9s} {secs:6.2f} s  ({from_snap:,} jobs from the snapshot + {replayed:,} WAL records; "
              f"{jobs:,} jobs)  {base / secs:.2f}x wal only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
