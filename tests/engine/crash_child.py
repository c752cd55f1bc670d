"""Child process for the SIGKILL tests: run a seeded history with snapshots, and just before the
N-th file call matching STEP (``op:path-fragment``, a ``Faults`` crash point), save the
acknowledged durable state and SIGKILL itself.

usage: python crash_child.py DIR STEP N SEED
       python crash_child.py DIR --progress OPS SEED
The second form runs OPS steps with background snapshots and publishes, after each step, how
many steps are acknowledged (a u64 at offset 0 of DIR/progress); the parent kills it at will.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tests.engine.walutil import T0, Driver, durable_view, random_step  # noqa: E402

from stalkd.log.fs import Faults  # noqa: E402
from stalkd.persist.wal import Wal  # noqa: E402

WAL_OPTS = dict(segment_size=4096, compact_min_bytes=1500, chunk_jobs=4)


def run_progress(directory: str, ops: int, seed: int) -> None:
    fd = os.open(os.path.join(directory, "progress"), os.O_WRONLY | os.O_CREAT, 0o644)
    wal = Wal.open(directory, durability="never", background=True, **WAL_OPTS)  # type: ignore[arg-type]
    e, _ = wal.recover(T0)
    d = Driver(wal, e, T0)
    rng = random.Random(seed)
    for i in range(ops):
        random_step(d, rng)
        wal.maintain(d.e, d.now)
        os.pwrite(fd, (i + 1).to_bytes(8, "little"), 0)
    sys.exit(3)


def main() -> None:
    if sys.argv[2] == "--progress":
        return run_progress(sys.argv[1], int(sys.argv[3]), int(sys.argv[4]))
    directory, step, nth, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    fs = Faults()
    wal = Wal.open(directory, durability="always", background=False, fs=fs, **WAL_OPTS)  # type: ignore[arg-type]
    e, _ = wal.recover(T0)
    d = Driver(wal, e, T0)

    def die() -> None:
        with open(os.path.join(directory, "expected.pickle"), "wb") as f:
            pickle.dump((durable_view(d.e), d.now), f)
            f.flush()
            os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    op, _, match = step.partition(":")
    fs.crash_at(op, match, nth, then=die)
    rng = random.Random(seed)
    for _ in range(600):
        random_step(d, rng)
        wal.maintain(d.e, d.now)
    sys.exit(3)  # the crash point was never reached


if __name__ == "__main__":
    main()
