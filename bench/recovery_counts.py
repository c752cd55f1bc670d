"""Recovery after a kill, counted in instructions rather than timed (issue 34).

A timing of recovery swings with the load of a shared machine; callgrind's instruction count does
not. This builds one kill directory (``restart_bench.build``'s ``trigger`` kind: ``--jobs`` puts
of 100-byte bodies, the snapshot trigger as it is, then a kill: the jobs come back from the
latest snapshot plus the WAL since) once, and counts, under ``valgrind --tool=callgrind``, what
``Wal.open`` + ``Wal.recover`` of it executes in each given tree (its Python, its ``src``):
the count of a run that only imports is subtracted, so the figure is what a restart pays for
its data (the log's open scans its active segment, recovery reads the snapshot and the tail).

    .venv/bin/python bench/recovery_counts.py --jobs 200000 \\
        --tree main=/work/main/.venv/bin/python:/work/main/src --tree this=.venv/bin/python:src

``--keep DIR`` builds into ``DIR`` (or reuses it when it is there); ``--annotate N`` prints the
N costliest functions (inclusive of nothing: self cost) of each tree's recovery run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1_700_000_000.0


def child(directory: str, recover: bool) -> None:
    from stalkd.persist.wal import Wal

    if recover:
        wal = Wal.open(directory, durability="never")
        _, info = wal.recover(T0 + 1)
        print(info.jobs, info.snapshot_jobs, info.records_replayed, file=sys.stderr)
        wal.abandon()


def counted(python: str, src: str, directory: str, recover: bool, out: str) -> int:
    """Instructions of one child run under callgrind (its whole process)."""
    args = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", python, __file__, "--child", directory]
    if not recover:
        args.append("--import-only")
    done = subprocess.run(args, env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise RuntimeError(f"{python} ({src}) failed:\n{done.stderr[-3000:]}")
    m = re.search(r"Collected : (\d+)", done.stderr)
    if m is None:
        raise RuntimeError(f"no callgrind total in:\n{done.stderr[-3000:]}")
    return int(m.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=200_000)
    p.add_argument("--tree", action="append", default=[], help="NAME=PYTHON:SRC (repeatable)")
    p.add_argument("--keep", help="the kill directory: built there if missing, else reused")
    p.add_argument("--worst", action="store_true", help="kill just before a snapshot is due (the longest tail)")
    p.add_argument("--annotate", type=int, default=0)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--import-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child, not a.import_only)
        return 0
    root = tempfile.mkdtemp(prefix="recovery-counts-", dir=os.environ.get("BENCH_DATA_DIR", "/var/tmp"))
    try:
        directory = a.keep or os.path.join(root, "kill")
        if not os.path.isdir(directory):
            sys.path.insert(0, HERE)
            import restart_bench

            t = time.perf_counter()
            restart_bench.build(directory, a.jobs, True, False, a.worst)
            print(f"built {directory} ({a.jobs:,} puts) in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        for spec in a.tree:
            name, _, rest = spec.partition("=")
            python, _, src = rest.partition(":")
            out = os.path.join(root, f"callgrind.{name}")
            full = counted(python, src, directory, True, out)
            base = counted(python, src, directory, False, os.path.join(root, f"callgrind.{name}.imports"))
            print(f"{name:>10}: open + recover {(full - base) / 1e6:8.1f} M instructions (whole run {full / 1e6:.1f} M, "
                  f"imports {base / 1e6:.1f} M)")
            if a.annotate:
                ann = subprocess.run(["callgrind_annotate", "--threshold=99", out], capture_output=True, text=True)
                lines = [ln for ln in ann.stdout.splitlines() if re.match(r"\s*[\d,]+ \(", ln)]
                print("\n".join(lines[: a.annotate + 1]))
            sys.stdout.flush()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
