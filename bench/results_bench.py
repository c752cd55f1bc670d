"""What keeping results costs the worker: drain time of N no-op jobs that return a small value,
with no results kept, with results in the stalkd server (in memory, and durable with ``-b``),
and in SQLite through SqlResults; ratios against "no results" on the same server in the same
run, cases alternating over ``--rounds`` rounds (best of each).

Each case: pre-fill N jobs (not timed), start a threads worker (concurrency 4) in this process,
time until every job is deleted. Servers on port 0 (the port read from /proc), stopped by PID.

Run: .venv/bin/python bench/results_bench.py [--jobs N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from stalkd.client import Client  # noqa: E402
from stalkd.worker import App, make_worker  # noqa: E402
from stalkd.worker.sqlresults import SqlResults  # noqa: E402
from support import spawn_server  # noqa: E402


def drain(address: str, jobs: int, keep: str, tmp: str) -> float:
    results: Any = SqlResults(f"sqlite:///{tmp}/r-{time.monotonic_ns()}.db") if keep == "sqlite" else None
    app = App(address, middleware=[], results=results)
    tube = f"b{time.monotonic_ns()}"

    @app.task(tube=tube, result_ttl=None if keep == "none" else 600)
    def work(p: int) -> int:
        return p + 1

    work.put_many(list(range(jobs)))
    w = make_worker(app, mode="threads", concurrency=4, reserve_timeout=1)
    t0 = time.perf_counter()
    th = threading.Thread(target=w.run, daemon=True)
    th.start()
    with Client(address) as c:
        while True:
            s = c.stats_tube(tube)  # the worker watches it: it exists until the worker stops
            if int(str(s["current-jobs-ready"])) + int(str(s["current-jobs-reserved"])) == 0:
                break
            time.sleep(0.01)
    elapsed = time.perf_counter() - t0
    w.stop(now=True)
    th.join(timeout=30)
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.1f} (1 min), jobs={args.jobs}, rounds={args.rounds}")
    with tempfile.TemporaryDirectory() as tmp:
        servers = {
            "memory": spawn_server([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", "0"],
                                   what="stalkd", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            "durable": spawn_server([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", "0",
                                     "-b", f"{tmp}/data"],
                                    what="stalkd", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        }
        try:
            cases = [(srv, keep) for srv in servers for keep in ("none", "server", "sqlite")]
            best: dict[tuple[str, str], float] = {}
            for _ in range(args.rounds):
                for srv, keep in cases:
                    t = drain(servers[srv].address, args.jobs, keep, tmp)
                    best[(srv, keep)] = min(t, best.get((srv, keep), float("inf")))
            for srv in servers:
                base = best[(srv, "none")]
                print(f"stalkd {srv}: no results {args.jobs / base:,.0f} jobs/s")
                for keep in ("server", "sqlite"):
                    t = best[(srv, keep)]
                    print(f"  results in {keep:6}: {args.jobs / t:,.0f} jobs/s = {base / t:.2f}x no results")
        finally:
            for s in servers.values():
                s.stop()


if __name__ == "__main__":
    main()
