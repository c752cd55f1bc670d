"""What every peer's task module shares: the no-op task body and the put->start stamp.

The bench starts each system's worker with this directory importable and tells it where its
server is through the environment: ``BENCH_STALKD`` (a stalkd address), ``BENCH_REDIS`` (a Redis
UNIX socket path) and ``BENCH_STAMPS`` (a directory for the latency stamps).
"""

from __future__ import annotations

import os
import time


def noop(payload: str) -> None:
    return None


def stamp(sent: float) -> None:
    """Record when a job sent at ``sent`` (time.time()) started: one line per job, one file per
    worker process, appended (small O_APPEND writes of whole lines do not interleave)."""
    started = time.time()
    path = os.path.join(os.environ["BENCH_STAMPS"], f"{os.getpid()}.txt")
    with open(path, "a") as f:
        f.write(f"{sent!r} {started!r}\n")


def redis_url() -> str:
    return "unix://" + os.environ.get("BENCH_REDIS", "/nonexistent")
