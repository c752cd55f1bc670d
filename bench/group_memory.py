"""A consumer group's memory and ack/checkpoint time with its head stuck: this tree against a peer.

The head (offset 0) is never acked, as with a poison message being retried, while the records
after it are: in order, every other one, in shuffled windows (many consumers finishing out of
order) and in a random order over the whole span; and, in "polled", polled ``BATCH`` at a
time and each poll acked at once (memory and time then include the polls: a group keeps a read
hint per poll, ``HINTS_MAX`` of them at most). Each case runs in a child process per tree
(the peer's ``src`` on PYTHONPATH), on one log of ``--records`` records:

* memory (tracemalloc, exact): what the group holds once the acks are in, the peak while acking,
  and the peak of one checkpoint (encoding the slot) on top of that;
* time per ack (per offset acked, in calls of one offset, or of ``BATCH`` in "batches"), and per checkpoint (``_persist`` without fsync; both trees have it), rough
  while other work shares the CPU.

    .venv/bin/python bench/group_memory.py                       # against /work/peer-ee6/src
    .venv/bin/python bench/group_memory.py --peer PATH/src --records 200000

Prints each figure for both trees and the ratio this tree / peer.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "src"
CASES = ("in_order", "batches", "every_other", "windows", "random", "polled")
BATCH = 100  # offsets per ack call in "batches": a consumer acking each poll's messages at once


def ack_order(case: str, n: int) -> list[int]:
    """The offsets acked (all above the stuck head at 0), in the order acked."""
    offs = list(range(1, n + 1))
    rnd = random.Random(34)
    if case == "every_other":
        return offs[::2]
    if case == "windows":  # shuffled within windows of 1,000: consumers finishing out of order
        out: list[int] = []
        for i in range(0, n, 1000):
            w = offs[i : i + 1000]
            rnd.shuffle(w)
            out.extend(w)
        return out
    if case == "random":
        rnd.shuffle(offs)
    return offs  # in order (also "batches": acked BATCH at a time)


def child(case: str, n: int, memory: bool) -> dict[str, float]:
    from stalkd.log import Log

    d = tempfile.mkdtemp(prefix="stalkd-groupmem-")
    try:
        log = Log.open(d, segment_size=64 * 2**20, durability="never")
        for i in range(0, n + 1, 65536):
            log.append_many([b"x"] * min(65536, n + 1 - i))
        # No checkpoint due while acking (timed apart, below).
        g = log.group("g", durability="every:100000000")
        polled = case == "polled"
        while not polled and g.poll(4096):
            pass
        order = list(range(1, n + 1)) if polled else ack_order(case, n)
        out: dict[str, float] = {}
        if memory:
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
        t = time.perf_counter()
        if polled:  # the head (offset 0) polled with the first batch, never acked
            while msgs := g.poll(BATCH):
                g.ack(*[m.offset for m in msgs if m.offset])
        elif case == "batches":
            for i in range(0, len(order), BATCH):
                g.ack(*order[i : i + BATCH])
        else:
            for off in order:
                g.ack(off)
        out["ack_us"] = (time.perf_counter() - t) / len(order) * 1e6
        if memory:
            cur, peak = tracemalloc.get_traced_memory()
            out["held_bytes"] = cur - base
            out["ack_peak_bytes"] = peak - base
            tracemalloc.reset_peak()
        t = time.perf_counter()
        with g._lock:
            g._persist(fsync=False)
        out["checkpoint_ms"] = (time.perf_counter() - t) * 1e3
        if memory:
            cur2, peak = tracemalloc.get_traced_memory()
            out["checkpoint_peak_bytes"] = peak - cur
            tracemalloc.stop()
        assert g.committed == 0 and g.lag == n + 1 - len(order)
        log.abandon()
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run(tree: Path, case: str, n: int, memory: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    args = [sys.executable, __file__, "--child", case, "--records", str(n)] + (["--memory"] if memory else [])
    res = subprocess.run(args, env=env, check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", default="/work/peer-ee6/src")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--child")
    ap.add_argument("--memory", action="store_true")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.records, a.memory)))
        return
    peer = Path(a.peer)
    print(f"{a.records:,} records after a stuck head; this tree {HERE} / peer {peer}")
    print(f"{'case':12} {'figure':22} {'peer':>14} {'this':>14} {'ratio':>8}")
    for case in a.cases.split(","):
        figs: dict[str, tuple[float, float]] = {}
        for memory in (True, False):  # tracemalloc slows every allocation: times come from a run without it
            old, new = run(peer, case, a.records, memory), run(HERE, case, a.records, memory)
            for k in old:
                if memory == k.endswith("bytes"):
                    figs[k] = (old[k], new[k])
        for k, (o, nw) in figs.items():
            print(f"{case:12} {k:22} {o:14,.2f} {nw:14,.2f} {nw / o if o else float('nan'):8.4f}")


if __name__ == "__main__":
    main()
