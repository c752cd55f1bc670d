"""Generate a realistic job history: a real ``stalkd serve`` with producers and workers.

Producers put jobs into a few tubes (pipelined). Workers reserve from every tube and behave
like real ones: most jobs succeed and are deleted; some fail and are released (up to two
retries, then buried: a dead letter); some are slow and overrun their 1 s TTR, so the server
times them out and another worker takes them again. Halfway through, the buried jobs of one
tube are kicked back. The server's WAL (``DIR/wal``) then holds the whole story for
``stalkd analyze DIR/wal``.

    .venv/bin/python bench/history.py --dir /tmp/hist --jobs 20000
    stalkd bench history --dir /tmp/hist --jobs 200000 --producers 4 --workers 8

Each job leaves about four WAL records (put, reserve, delete, plus retries): 250k jobs give
about a million records. The server runs with ``-F`` (no fsync) since durability is not what
is measured here, and with 1 GiB WAL segments so that compaction (which drops old segments)
does not cut the history short. Jobs whose outcome is random are decided from ``--seed``, so two runs put the
same jobs (thread timing still interleaves them differently).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import log_tail, popen_logged, wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)

TUBES = {"emails": 0.5, "images": 0.25, "reports": 0.15, "webhooks": 0.10}
TTR = 1  # seconds: slow jobs overrun it


def start_server(data: Path, wal_size: int) -> tuple[subprocess.Popen[bytes], int]:
    """stalkd on port 0 and the port the kernel gave it (read from /proc)."""
    # Big WAL segments: the server compacts (drops) WAL segments once it has written more than
    # a segment's worth since its last snapshot, and dropped segments leave the history.
    cmd = [sys.executable, "-m", "stalkd.cli", "serve", "-b", str(data), "-F", "-l", "127.0.0.1",
           "-p", "0", "-s", str(wal_size), "--log-level", "warning"]
    log = data / "serve.log"  # never a pipe: nobody reads it while the server runs
    proc = popen_logged(cmd, log)
    try:
        return proc, wait_for_listener(proc, 30, "stalkd serve")
    except (RuntimeError, TimeoutError) as e:
        proc.kill()
        raise RuntimeError(f"{e}: {log_tail(log)}") from None


class Tally:
    """Shared counters and the end condition (every job deleted or buried for good)."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.lock = threading.Lock()
        self.c: Counter[str] = Counter()
        self.attempts: dict[int, int] = {}
        self.done = threading.Event()

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.c[key] += n
            if self.c["deleted"] + self.c["buried"] - self.c["kicked"] >= self.jobs:
                self.done.set()

    def attempt(self, jid: int) -> int:
        with self.lock:
            self.attempts[jid] = self.attempts.get(jid, 0) + 1
            return self.attempts[jid]


def producer(address: str, seed: int, count: int, tally: Tally, work_ms: float) -> None:
    from stalkd.client import Client

    rng = random.Random(seed)
    names, weights = list(TUBES), list(TUBES.values())
    with Client(address, timeout=30) as c:
        left = count
        while left:
            n = min(left, 200)
            by_tube: dict[str, list[bytes]] = {}
            for _ in range(n):
                r = rng.random()
                kind = "fail" if r < 0.08 else "slow" if r < 0.10 else "ok"
                tube = rng.choices(names, weights)[0]
                work = round(rng.expovariate(1 / work_ms), 2) if work_ms > 0 else 0.0
                body = {"kind": kind, "work_ms": work, "pad": "x" * rng.randint(0, 120)}
                by_tube.setdefault(tube, []).append(json.dumps(body).encode())
            for tube, bodies in by_tube.items():
                c.use(tube)
                c.put_many(bodies, priority=rng.choice((0, 1024, 1024, 4096)), ttr=TTR)
            tally.add("put", n)
            left -= n


def worker(address: str, tally: Tally) -> None:
    from stalkd.client import Client, errors

    with Client(address, timeout=30) as c:
        for tube in TUBES:
            c.watch(tube)
        c.ignore("default")
        while not tally.done.is_set():
            try:
                job = c.reserve(timeout=1)
            except errors.TimedOut:
                continue
            except errors.DeadlineSoon:
                # This worker walked away from a slow job whose TTR is about to end; until
                # the server times it out, every reserve answers DEADLINE_SOON. Back off.
                tally.done.wait(0.05)
                continue
            body = json.loads(job.body)
            kind = body["kind"]
            if body.get("work_ms"):
                tally.done.wait(body["work_ms"] / 1000)  # the job's simulated work
            n = tally.attempt(job.id)
            try:
                if kind == "slow" and n == 1:
                    # Overrun: walk away from it; the server times it out after its TTR.
                    tally.add("overrun")
                elif kind == "fail" and n <= 3:
                    if n == 3:
                        c.bury(job, priority=1024)
                        tally.add("buried")
                    else:
                        c.release(job, priority=1024, delay=0)
                        tally.add("released")
                else:
                    c.delete(job)
                    tally.add("deleted")
            except errors.NotFound:
                tally.add("lost")  # its TTR ran out under load before we answered


def kicker(address: str, tally: Tally) -> None:
    """Once a quarter of the jobs are settled, kick the buried jobs of one tube back."""
    from stalkd.client import Client

    while not tally.done.wait(0.2):
        if tally.c["deleted"] >= tally.jobs // 4 and tally.c["buried"]:
            with Client(address, timeout=30) as c:
                c.use("images")
                kicked = c.kick(1000)
            with tally.lock:
                tally.attempts.clear()  # kicked jobs get fresh attempts
            tally.add("kicked", kicked)
            return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="server data directory (the WAL goes to DIR/wal)")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work-ms", type=float, default=2.0, help="mean simulated work per job (exponential)")
    ap.add_argument("--wal-size", type=int, default=1 << 30,
                    help="server WAL segment bytes (default 1 GiB: ~7M records before compaction)")
    ap.add_argument("--timeout", type=float, default=3600, help="give up after this many seconds")
    args = ap.parse_args()
    data = Path(args.dir)
    data.mkdir(parents=True, exist_ok=True)
    proc, port = start_server(data, args.wal_size)
    address = f"127.0.0.1:{port}"
    tally = Tally(args.jobs)
    started = time.monotonic()
    try:
        share = [args.jobs // args.producers + (i < args.jobs % args.producers) for i in range(args.producers)]
        threads = [threading.Thread(target=producer, args=(address, args.seed * 1000 + i, n, tally, args.work_ms), daemon=True)
                   for i, n in enumerate(share)]
        threads += [threading.Thread(target=worker, args=(address, tally), daemon=True) for _ in range(args.workers)]
        threads.append(threading.Thread(target=kicker, args=(address, tally), daemon=True))
        for t in threads:
            t.start()
        last = 0.0
        while not tally.done.wait(1.0):
            if time.monotonic() - started > args.timeout:
                print("timed out before every job was settled", file=sys.stderr)
                return 1
            if time.monotonic() - last > 10:
                last = time.monotonic()
                print(f"  {time.monotonic() - started:6.0f} s  {dict(tally.c)}", flush=True)
        for t in threads:
            t.join(timeout=10)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    seconds = time.monotonic() - started
    from stalkd.log import LogReader

    wal = data / "wal"
    with LogReader(wal) as r:
        n_records = sum(1 for _ in r.read())
    print(f"{args.jobs:,} jobs in {seconds:.1f} s: {dict(tally.c)}")
    print(f"WAL {wal}: {n_records:,} records ({n_records / seconds:,.0f} records/s)")
    print(f"next: stalkd analyze {wal} --out {data / 'analysis'}")
    with LogReader(wal) as r:
        first = next((f.offset for f in r.read()), 0)
    if first > 0:
        print(f"note: compaction dropped WAL offsets below {first:,}; they are not in the history "
              "(raise --wal-size)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
