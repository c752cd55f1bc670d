"""The WAL's files under full-speed churn against their bound, 2 x live data + 2 segments (issue 34).

A snapshot lets the segments below it go, so the files stay within the bound only if compaction
looks at least once per segment written. A server looks at start, once a second, and (since this
bench was written) each time the log seals a segment. This bench churns as fast as one pipelined
connection can: ``--batch`` puts of ``--body`` bytes, then their deletes, so almost nothing stays
live, for ``--seconds``, under ``-F`` (no fsync: the fastest writer, the most segments a second).
A thread samples the segment files' bytes every 10 ms; the largest sample is printed against the
bound. ``--peer-src DIR`` runs another stalkd tree's ``src/`` first (before), the two trees
alternating ``--rounds`` times.

    .venv/bin/python bench/churn_bench.py
    .venv/bin/python bench/churn_bench.py --peer-src /tmp/main/src --segment 262144
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from support import wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)


def segment_files(wal: str) -> int:
    total = 0
    for name in os.listdir(wal) if os.path.isdir(wal) else ():
        if name.startswith("seg-"):
            with contextlib.suppress(FileNotFoundError):  # retired between listdir and stat
                total += os.path.getsize(os.path.join(wal, name))
    return total


def lines(f: object, n: int) -> list[bytes]:
    return [f.readline() for _ in range(n)]  # type: ignore[attr-defined]


def run(src: str | None, args: argparse.Namespace) -> tuple[int, int, float]:
    """(largest segment files' bytes, jobs churned, mean segments written a second)."""
    data = tempfile.mkdtemp(prefix="churn-bound-", dir=os.environ.get("BENCH_DATA_DIR", "/var/tmp"))
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    proc = subprocess.Popen([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", "0",
                             "-b", os.path.join(data, "d"), "-F", "-s", str(args.segment)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    largest, done = 0, threading.Event()
    wal = os.path.join(data, "d", "wal")

    def sample() -> None:
        nonlocal largest
        while not done.wait(0.01):
            largest = max(largest, segment_files(wal))

    jobs = 0
    try:
        port = wait_for_listener(proc, 60, "stalkd")
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        body = b"x" * args.body
        put = b"put 0 0 60 %d\r\n%s\r\n" % (args.body, body)
        with socket.create_connection(("127.0.0.1", port)) as s, s.makefile("rb") as f:
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.seconds:
                s.sendall(put * args.batch)
                ids = [int(line.split()[1]) for line in lines(f, args.batch)]
                s.sendall(b"".join(b"delete %d\r\n" % i for i in ids))
                assert all(r == b"DELETED\r\n" for r in lines(f, args.batch))
                jobs += args.batch
            elapsed = time.monotonic() - t0
        done.set()
        sampler.join()
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)
    # Segments a second estimated from the records (a put and a delete per job, ~60 B of frame
    # and record fields besides the body).
    return largest, jobs, jobs * 2 * (args.body + 60) / args.segment / elapsed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=8.0, help="churn time per run (default 8)")
    p.add_argument("--segment", type=int, default=4 * 2**20, help="-s, segment bytes (default 4 MiB)")
    p.add_argument("--body", type=int, default=100, help="body bytes (default 100)")
    p.add_argument("--batch", type=int, default=64, help="puts per pipelined batch (default 64)")
    p.add_argument("--rounds", type=int, default=2, help="runs per tree, alternating (default 2)")
    p.add_argument("--peer-src", help="another stalkd tree's src/ (before)")
    args = p.parse_args()
    bound = 2 * args.segment  # live data is at most a batch: under 0.1 % of a segment
    trees = ([("before", args.peer_src)] if args.peer_src else []) + [("after", None)]
    print(f"full-speed churn, {args.batch} x {args.body} B put then delete, -F, segments of "
          f"{args.segment} B; bound 2 x live + 2 segments = {bound} B (live ~0)")
    for r in range(args.rounds):
        for name, src in trees:
            largest, jobs, rate = run(src, args)
            print(f"round {r + 1} {name:6}: largest segment files {largest:>11,} B = {largest / bound:.2f}x the "
                  f"bound; {jobs:,} jobs in {args.seconds:.0f} s, ~{rate:.1f} segments/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
