"""A running standby's resync puts the primary's copy in place of its own (``replication/swap.py``).
A power cut before any step of that swap, on a file system that keeps a new entry only once its
directory is fsynced (campaign/powerfs.py, strict), leaves the old copy or the new one whole once
the next start has settled it: never neither, never the WAL of one with the snapshots of the
other, and the old one is kept in quarantine/ when the new one won.

Found by the pair power-cut campaign: a standby that had resynced came back with its WAL under
``resync/`` (the rename was durable in the data directory, and not yet out of ``resync/``), and
the next start removed ``resync/`` with the WAL in it."""

from __future__ import annotations

import glob
import os

from campaign.powerfs import PowerFS

from stalkd.log.fs import REAL, CrashPoint, Faults
from stalkd.replication.swap import RESYNC_DIR, settle, swap_in

FILES = {"wal": "seg-0.log", "snapshots": "snap-0.snap"}


def _durable_file(path: str, data: bytes) -> None:
    REAL.makedirs(os.path.dirname(path))  # each directory made has its entry fsynced
    fd = REAL.open(path, os.O_WRONLY, create=True, truncate=True)
    try:
        REAL.write_all(fd, data)
        REAL.fsync(fd)
    finally:
        os.close(fd)
    REAL.fsync_dir(os.path.dirname(path))


def _lay_out(data: str) -> None:
    """A data directory with its own WAL and snapshot, and a complete copy beside it in resync/."""
    for sub, name in FILES.items():
        _durable_file(os.path.join(data, sub, name), f"old {sub}".encode())
        _durable_file(os.path.join(data, RESYNC_DIR, sub, name), f"new {sub}".encode())


def _which(root: str) -> str:
    """'old' or 'new' when ``root`` holds that copy whole; otherwise what it holds."""
    found = []
    for sub, name in FILES.items():
        try:
            with open(os.path.join(root, sub, name), "rb") as f:
                found.append(f.read().decode())
        except FileNotFoundError:
            found.append(f"no {sub}")
    for side in ("old", "new"):
        if found == [f"{side} {sub}" for sub in FILES]:
            return side
    return ", ".join(found)


def _swap(data: str, crash: tuple[str, int] | None) -> bool:
    """Swap, stopping before the ``crash`` call (op, nth) if given; whether it stopped."""
    fs = Faults()
    if crash is not None:
        fs.crash_at(crash[0], "", crash[1])
    try:
        swap_in(data, os.path.join(data, RESYNC_DIR), "the test's resync", None, fs)
    except CrashPoint:
        return True
    return False


def test_a_power_cut_at_any_step_of_a_resync_swap_leaves_one_whole_copy(strict: PowerFS) -> None:
    power = strict
    whole = os.path.join(power.mountpoint, "whole")
    _lay_out(whole)
    counter = Faults()
    swap_in(whole, os.path.join(whole, RESYNC_DIR), "the test's resync", None, counter)
    assert _which(whole) == "new" and not os.path.exists(os.path.join(whole, RESYNC_DIR))
    points = [("fsync", n) for n in range(1, counter.calls["fsync"] + 1)]
    points += [("replace", n) for n in range(1, counter.calls["replace"] + 1)]
    assert len(points) >= 10  # every fsync (of files and directories) and every rename

    dirs = {}
    for i, point in enumerate(points):
        dirs[point] = data = os.path.join(power.mountpoint, f"d{i}")
        _lay_out(data)
        assert _swap(data, point), f"{point}: the swap ended before that call"
        power.cut()  # the power goes and comes back: the mount holds what was durable
        settle(data)  # what a start does before it opens the directory
        assert not os.path.exists(os.path.join(data, RESYNC_DIR)), point

    outcome = {}
    for point, data in dirs.items():
        outcome[point] = side = _which(data)
        assert side in ("old", "new"), f"a cut before {point} left {side}"
        if side == "new":  # the old copy is quarantined, never deleted
            kept = [_which(q) for q in glob.glob(os.path.join(data, "quarantine", "*"))]
            assert "old" in kept, f"a cut before {point}: the old copy is not in quarantine ({kept})"
    # Once the copy is marked complete (its READY file and that file's entry durable: the first
    # two fsyncs), every later cut ends with the new copy.
    fsyncs = [outcome[("fsync", n)] for n in range(1, counter.calls["fsync"] + 1)]
    assert fsyncs[:2] == ["old", "old"] and set(fsyncs[2:]) == {"new"}, fsyncs
    assert {outcome[("replace", n)] for n in range(1, counter.calls["replace"] + 1)} == {"new"}
