"""Crash injection at every step of snapshot and compaction: recovery gives the acknowledged state.

A crash point is a file-system call (``stalkd.log.fs.Faults.crash_at``): the process dies just
before the ``nth`` call of an operation on a matching path. Two ways to die there: an exception
(in process, then the WAL is abandoned the way a dying process leaves it), and SIGKILL of a
child process.
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

from stalkd.engine import Engine
from stalkd.engine.model import decode
from stalkd.engine.replay import finish, replay
from stalkd.log.fs import CrashPoint, Faults
from stalkd.persist.wal import Wal, WalError
from support import log_tail, popen_logged

from .walutil import T0, Driver, durable_view, random_step

# (operation, path fragment): every file call a snapshot and the compaction after it make.
STEPS = [
    "open:.snap.tmp",  # the snapshot file is created
    "write:.snap.tmp",  # its header, each chunk of jobs, its trailer
    "fsync:.snap.tmp",
    "replace:.snap.tmp",  # renamed into place
    "fsync_dir:snapshots",
    "unlink:seg-",  # WAL segments the snapshot made unnecessary
    "unlink:.snap",  # older snapshots (from the second snapshot on)
]


def crash_point(step: str) -> tuple[str, str]:
    op, _, match = step.partition(":")
    return op, match


def run_until_fault(path: Path, step: str, nth: int, seed: int) -> tuple[Wal, Driver, Faults, bool]:
    fs = Faults()
    wal = Wal.open(path, durability="never", segment_size=4096, compact_min_bytes=1500,
                   chunk_jobs=4, background=False, fs=fs)  # fmt: skip
    e, _ = wal.recover(T0)
    fs.crash_at(*crash_point(step), nth=nth)  # counted from here: recovery's calls are not steps
    d = Driver(wal, e, T0)
    rng = random.Random(seed)
    for _ in range(600):
        random_step(d, rng)
        try:
            wal.maintain(d.e, d.now)
        except (CrashPoint, WalError):
            return wal, d, fs, fs.crashed is not None
    return wal, d, fs, False


@pytest.mark.parametrize("nth", [1, 3])
@pytest.mark.parametrize("step", STEPS)
def test_exception_at_step_then_crash(tmp_path: Path, step: str, nth: int) -> None:
    wal, d, _, fired = run_until_fault(tmp_path, step, nth, seed=nth)
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
    wal, d, fs, fired = run_until_fault(tmp_path, step, 2, seed=11)
    assert fired
    fs.heal()
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


def candidate_views(seed: int, ops: int, tmp: Path) -> list[tuple[object, float]]:
    """Every state a crash during step ``ops + 1`` may leave, with the clock to judge it at:
    after step ``ops``, after each record of step ``ops + 1`` (a ``kick 2`` writes two records,
    and a segment roll between them can be torn, as beanstalkd's per-job kick records can)."""
    wal = Wal.open(tmp, durability="never", compact_min_bytes=1 << 62)
    e, _ = wal.recover(T0)
    d = Driver(wal, e, T0)
    rng = random.Random(seed)
    for _ in range(ops):
        random_step(d, rng)
    n_a, now_a = wal.records_written, d.now
    random_step(d, rng)
    n_b, now_b = wal.records_written, d.now
    records = [decode(f.payload) for f in wal.log.read(0)]
    wal.close()
    out = []
    for k in range(n_a, n_b + 1):
        eng = Engine()
        for r in records[:k]:
            replay(eng, r)
        finish(eng)
        eng.tick(now_a if k == n_a else now_b)
        out.append((durable_view(eng), now_a if k == n_a else now_b))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_at_a_random_moment_with_background_snapshots(tmp_path: Path, seed: int) -> None:
    """Kill the child whenever it has acknowledged a random number of steps (snapshots run in a
    background thread meanwhile); recovery gives the state after the last acknowledged step, or
    a state part-way into the next one (killed between writing it and acknowledging it)."""
    import time

    work = tmp_path / "data"
    work.mkdir()
    target = random.Random(seed).randint(300, 1500)
    log = tmp_path / "child.log"
    proc = popen_logged([sys.executable, CHILD, str(work), "--progress", "4000", str(seed)], log)
    progress = work / "progress"
    deadline = time.monotonic() + 120
    try:
        while True:
            done = int.from_bytes(progress.read_bytes()[:8], "little") if progress.exists() else 0
            if done >= target or proc.poll() is not None:
                break
            assert time.monotonic() < deadline, f"child reached only {done} steps"
            time.sleep(0.005)  # polling a condition (with a deadline), not waiting for a guess
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, log_tail(log, 2000)
    acked = int.from_bytes(progress.read_bytes()[:8], "little")
    candidates = candidate_views(seed, acked, tmp_path / "replay")
    wal = Wal.open(work)
    e, _ = wal.recover(T0)
    matches = []
    for view, now in candidates:
        e.tick(now)  # delays that ran out by the child's clock are ready there too
        matches.append(durable_view(e) == view)
    wal.close()
    assert any(matches), f"recovered state is none of those possible after step {acked}"


@pytest.mark.parametrize("durability", ["never", "every:60000", "always"])
def test_a_snapshot_is_published_only_over_a_durable_wal(tmp_path: Path, durability: str) -> None:
    """When a snapshot is renamed into place, every WAL record below its start offset is fsynced,
    under every policy. Under ``never`` the WAL is otherwise fsynced only at segment rolls: a
    power cut after the rename left a log ending below the offset the snapshot covers, and the
    server then refused to start (campaign.powercut's "restart failure", policy never)."""
    fs = Faults()
    wal = Wal.open(tmp_path, durability=durability, segment_size=1 << 20, compact_min_bytes=1500,
                   chunk_jobs=4, background=False, fs=fs)  # fmt: skip
    e, _ = wal.recover(T0)
    seen: list[tuple[int, int]] = []  # (durable offset, the snapshot's start offset) at each rename

    def at_rename() -> None:
        s = wal._snap
        assert s is not None
        seen.append((wal.log.durable_offset, s.start_offset))

    fs.crash_at("replace", ".snap.tmp", then=at_rename)
    d = Driver(wal, e, T0)
    rng = random.Random(7)
    for _ in range(600):
        random_step(d, rng)
        try:
            wal.maintain(d.e, d.now)
        except CrashPoint:
            fs.heal()
            break
    assert seen, "no snapshot was started"
    durable, start = seen[0]
    assert start > 0 and durable >= start
    wal.close()
