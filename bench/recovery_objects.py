"""What the objects of recovered jobs cost, part by part, and the memory a recovery leaves (issue 34).

``--parts N`` builds restart_bench's floor for N jobs (what a loader making one Python object per
job builds) a part at a time and times each: the ids, the bodies (``eager``: a ``bytes`` each, as
recovery made them before lazy bodies; ``lazy``: none, the jobs made by ``new_lazy_job`` over one
shared buffer), the created times, the ``Job`` objects, the id -> job dict and the ready-heap keys,
the collector off, in a fresh process per variant, the variants alternating ``--repeat`` times.

``--rss DIR --tree NAME=PYTHON:SRC ...`` recovers a copy of the data directory DIR (``Wal.open``
+ ``recover``) once per tree, in a fresh process each, and prints the time, the CPU and how much
the process's resident memory grew.

    .venv/bin/python bench/recovery_objects.py --parts 1000000 --repeat 2
    .venv/bin/python bench/recovery_objects.py --rss /var/tmp/kill200k \\
        --tree peer=/work/peer/.venv/bin/python:/work/peer/src --tree this=.venv/bin/python:src
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import repeat

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
T0_US = 1_700_000_000_000_000


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def parts(n: int, variant: str) -> str:
    from stalkd.engine.model import JobState
    from stalkd.engine.objects import Job, Tube, new_job, new_lazy_job

    blob = b"x" * (100 * n)
    gc.disable()
    r0 = _rss_mib()
    spent: dict[str, float] = {}

    def timed(name: str, make):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        out = make()
        spent[name] = time.perf_counter() - t
        return out

    ids = timed("ids", lambda: list(range(1 << 32, (1 << 32) + n)))
    if variant == "eager":
        bodies = timed("bodies", lambda: [blob[i : i + 100] for i in range(0, 100 * n, 100)])
    else:
        bodies = timed("bodies", lambda: list(repeat(blob, n)))
    created = timed("created", lambda: list(range(T0_US, T0_US + n)))
    tube, ready = Tube("t", 1), JobState.READY
    if variant == "eager":
        jobs = timed("jobs", lambda: list(map(new_job, ids, repeat(tube, n), repeat(1, n), repeat(0, n),
                                              repeat(60, n), bodies, repeat(ready, n), created)))  # fmt: skip
    else:
        jobs = timed("jobs", lambda: list(map(new_lazy_job, ids, repeat(tube, n), repeat(1, n), repeat(0, n),
                                              repeat(60, n), bodies, range(0, 100 * n, 100), repeat(100, n),
                                              repeat(ready, n), created)))  # fmt: skip
    held = [timed("dict", lambda: dict(zip(ids, jobs, strict=True))), timed("keys", lambda: [(1 << 64) | i for i in ids])]
    grown = _rss_mib() - r0
    assert len(held) == 2
    return (f"{variant:5}: " + " ".join(f"{k} {v * 1000:4.0f}" for k, v in spent.items())
            + f" | total {sum(spent.values()) * 1000:5.0f} ms, RSS +{grown:.0f} MiB "
            f"(shared buffer not counted), Job {Job.__basicsize__} B")  # fmt: skip


def rss(directory: str) -> str:
    from stalkd.persist.wal import Wal

    root = tempfile.mkdtemp(prefix="recovery-objects-", dir=os.environ.get("BENCH_DATA_DIR", "/var/tmp"))
    try:
        copy = os.path.join(root, "data")
        shutil.copytree(directory, copy)
        r0 = _rss_mib()
        t, c = time.perf_counter(), time.process_time()
        wal = Wal.open(copy, durability="never")
        _, info = wal.recover(T0_US / 1e6 + 1)
        t, c = time.perf_counter() - t, time.process_time() - c
        grown = _rss_mib() - r0
        wal.abandon()
        return (f"{info.jobs:,} jobs = {info.snapshot_jobs:,} + {info.records_replayed:,}: {t * 1000:.0f} ms, "
                f"CPU {c * 1000:.0f} ms, RSS +{grown:.0f} MiB")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", type=int, help="jobs of the floor built part by part")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--rss", help="a data directory to recover (a copy) per --tree")
    p.add_argument("--tree", action="append", default=[], help="NAME=PYTHON:SRC (repeatable)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        kind, arg = a.child
        print(parts(a.parts, arg) if kind == "parts" else rss(arg))
        return 0
    if a.parts:
        for _ in range(a.repeat):
            for variant in ("eager", "lazy"):
                done = subprocess.run([sys.executable, __file__, "--parts", str(a.parts), "--child", "parts", variant],
                                      env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, text=True,
                                      check=True, timeout=600)  # fmt: skip
                print(done.stdout, end="")
    for spec in a.tree if a.rss else []:
        name, _, rest = spec.partition("=")
        python, _, src = rest.partition(":")
        done = subprocess.run([python, __file__, "--child", "rss", a.rss], env={**os.environ, "PYTHONPATH": src},
                              capture_output=True, text=True, check=True, timeout=1800)  # fmt: skip
        print(f"{name:>8}: {done.stdout}", end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
