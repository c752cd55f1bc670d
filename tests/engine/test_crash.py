"""Crash injection at every step of snapshot and compaction: recovery gives the acknowledged state.

Two ways to crash: an exception raised at the step (in process, then the WAL is abandoned the way
a dying process leaves it), and SIGKILL of a child process at the step.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stalkd.engine.wal import Wal, WalError

from .walutil import T0, Driver, durable_view, random_step

STEPS = [
    "snapshot-begin", "snapshot-open", "snapshot-chunk", "snapshot-trailer", "snapshot-fsync",
    "snapshot-rename", "snapshot-dirsync", "compact-retain", "compact-drop-old",
]  # fmt: skip


class Boom(Exception):
    pass


def run_until_fault(path: Path, step: str, nth: int, seed: int) -> tuple[Wal, Driver, bool]:
    hits = 0

    def fault(name: str) -> None:
        nonlocal hits
        if name == step:
            hits += 1
            if hits == nth:
                raise Boom(step)

    wal = Wal.open(path, durability="never", segment_size=4096, compact_min_bytes=1500,
                   chunk_jobs=4, background=False, fault=fault)  # fmt: skip
    e, _ = wal.recover(T0)
    d = Driver(wal, e, T0)
    rng = random.Random(seed)
    for _ in range(600):
        random_step(d, rng)
        try:
            wal.maintain(d.e, d.now)
        except (Boom, WalError):
            return wal, d, True
    return wal, d, False


@pytest.mark.parametrize("nth", [1, 3])
@pytest.mark.parametrize("step", STEPS)
def test_exception_at_step_then_crash(tmp_path: Path, step: str, nth: int) -> None:
    wal, d, fired = run_until_fault(tmp_path, step, nth, seed=nth)
    assert fired, f"{step} #{nth} never reached"
    expect, now = durable_view(d.e), d.now
    wal.abandon()
    wal2 = Wal.open(tmp_path)
    e, _ = wal2.recover(now)
    assert durable_view(e) == expect
    wal2.close()


@pytest.mark.parametrize("step", STEPS)
def test_exception_at_step_then_carry_on(tmp_path: Path, step: str) -> None:
    """A failed snapshot is dropped; the server keeps going and later snapshots work."""
    wal, d, fired = run_until_fault(tmp_path, step, 2, seed=11)
    assert fired
    wal._fault = lambda name: None
    rng = random.Random(5)
    before = wal.snapshots_written
    for _ in range(300):
        random_step(d, rng)
        wal.maintain(d.e, d.now)
    assert wal.snapshots_written > before
    expect, now = durable_view(d.e), d.now
    wal.close()
    wal2 = Wal.open(tmp_path)
    e, _ = wal2.recover(now)
    assert durable_view(e) == expect
    wal2.close()


CHILD = os.path.join(os.path.dirname(__file__), "crash_child.py")


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS)
def test_sigkill_at_step(tmp_path: Path, step: str) -> None:
    proc = subprocess.run([sys.executable, CHILD, str(tmp_path), step, "2", "4"],
                          capture_output=True, timeout=120)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    with open(tmp_path / "expected.pickle", "rb") as f:
        expect, now = pickle.load(f)
    wal = Wal.open(tmp_path)
    e, _ = wal.recover(now)
    assert durable_view(e) == expect
    wal.close()
