"""Child process for the SIGKILL tests: run a seeded history with snapshots, and at the N-th
time the WAL reaches STEP, save the acknowledged durable state and SIGKILL itself.

usage: python crash_child.py DIR STEP N SEED
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tests.engine.walutil import T0, Driver, durable_view, random_step  # noqa: E402

from stalkd.engine.wal import Wal  # noqa: E402


def main() -> None:
    directory, step, nth, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    hits = 0
    holder: dict[str, Driver] = {}

    def fault(name: str) -> None:
        nonlocal hits
        if name != step:
            return
        hits += 1
        if hits == nth:
            with open(os.path.join(directory, "expected.pickle"), "wb") as f:
                pickle.dump((durable_view(holder["d"].e), holder["d"].now), f)
                f.flush()
                os.fsync(f.fileno())
            os.kill(os.getpid(), signal.SIGKILL)

    wal = Wal.open(directory, durability="always", segment_size=4096, compact_min_bytes=1500,
                   chunk_jobs=4, background=False, fault=fault)  # fmt: skip
    e, _ = wal.recover(T0)
    d = holder["d"] = Driver(wal, e, T0)
    rng = random.Random(seed)
    for _ in range(600):
        random_step(d, rng)
        wal.maintain(d.e, d.now)
    sys.exit(3)  # the crash point was never reached


if __name__ == "__main__":
    main()
