"""The engine's job table at a million jobs (issue 30): what a put costs, and its longest step.

In a child process per tree and build (this tree and ``--peer-src``'s, compiled and with
``STALKD_NO_EXTENSIONS=1``), alternating, medians of ``--rounds``:

* ``fill``: ``--jobs`` puts into an empty engine: CPU per put (ns) and the longest single put
  (thread CPU ms; a single dict of jobs rebuilds its whole table when it grows);
* ``churn``: with ``--jobs`` live, put one and delete the oldest, ``--jobs`` times: CPU per
  put+delete pair and the longest pair (a dict refilled by churn rebuilds too).

    .venv/bin/python bench/jobtable_bench.py --peer-src /work/peer-3ce/src [--jobs 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")


def child(n: int) -> dict[str, float]:
    import gc

    from stalkd.engine import Engine
    from stalkd.protocol.commands import Delete, Put

    clock = time.thread_time_ns
    e = Engine(records=False)
    e.connect(1, 0.0)
    apply, body = e.apply, b"x" * 100
    put = Put(0, 0, 60, body)
    gc.disable()  # as the server runs its loop: collections are not the table's cost
    worst = 0
    start = clock()
    for _ in range(n):
        t = clock()
        apply(1, put, 0.0)
        t = clock() - t
        if t > worst:
            worst = t
    fill = clock() - start
    fill_worst = worst
    worst = 0
    oldest = 1
    start = clock()
    for _ in range(n):
        t = clock()
        apply(1, put, 0.0)
        apply(1, Delete(oldest), 0.0)
        t = clock() - t
        oldest += 1
        if t > worst:
            worst = t
    churn = clock() - start
    assert len(e.jobs) == n
    return {"fill_ns": fill / n, "fill_max_ms": fill_worst / 1e6, "churn_ns": churn / n,
            "churn_max_ms": worst / 1e6}  # fmt: skip


def run(src: str, pure: bool, n: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=src)
    env.pop("STALKD_NO_EXTENSIONS", None)
    if pure:
        env["STALKD_NO_EXTENSIONS"] = "1"
    out = subprocess.run([sys.executable, __file__, "--child", str(n)], env=env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peer-src", help="another tree's src/ (say main's), measured in the same run")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child is not None:
        print(json.dumps(child(ns.child)))
        return
    if ns.peer_src is None:
        ap.error("--peer-src is required")
    trees = {"this": SRC, "peer": os.path.abspath(ns.peer_src)}
    got: dict[tuple[str, bool], list[dict[str, float]]] = {}
    for _ in range(ns.rounds):
        for pure in (False, True):
            for name, src in trees.items():
                got.setdefault((name, pure), []).append(run(src, pure, ns.jobs))
    print(f"# {ns.jobs} jobs, medians of {ns.rounds}; CPU ns per put (fill) or put+delete (churn), "
          f"longest one in thread CPU ms; load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'build':9} {'tree':5} {'fill ns':>8} {'max ms':>7} {'churn ns':>9} {'max ms':>7}")
    for pure in (False, True):
        rows = {}
        for name in trees:
            rs = got[(name, pure)]
            rows[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            r = rows[name]
            print(f"{'pure' if pure else 'compiled':9} {name:5} {r['fill_ns']:8.0f} {r['fill_max_ms']:7.2f} "
                  f"{r['churn_ns']:9.0f} {r['churn_max_ms']:7.2f}")  # fmt: skip
        a, b = rows["this"], rows["peer"]
        print(f"{'':9} {'ratio':5} {a['fill_ns'] / b['fill_ns']:7.2f}x {'':7} {a['churn_ns'] / b['churn_ns']:8.2f}x")


if __name__ == "__main__":
    main()
