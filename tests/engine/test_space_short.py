"""Compaction while the disk is full (issue 11 item 3), through the file-system seam: a snapshot
that fails for lack of space leaves compaction due (it was reset before: the retry never ran
without new writes), and a clean stop's snapshot spares the next start the dead WAL."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from stalkd.engine import Engine
from stalkd.log.fs import Faults
from stalkd.persist.wal import Wal
from stalkd.persist.walspace import SNAP_RESERVE
from stalkd.protocol.commands import Delete, Put
from support import small_tmpfs

T = 1_700_000_000.0


def churn(wal: Wal, n: int) -> Engine:
    eng, _ = wal.recover(now=T)
    eng.connect(1, T)
    for _ in range(n):
        out = eng.apply(1, Put(0, 0, 60, b"x" * 200), T)
        wal.write(out.records)
        (jid,) = [r.job_id for r in out.records]
        wal.write(eng.apply(1, Delete(jid), T).records)
    wal.sync()
    return eng


def test_a_snapshot_that_fails_for_lack_of_space_stays_due(tmp_path: Path) -> None:
    fs = Faults()
    wal = Wal.open(tmp_path, durability="never", segment_size=65536, compact_min_bytes=4096,
                   background=False, fs=fs)  # fmt: skip
    try:
        eng = churn(wal, 200)
        assert wal.compaction_due(eng)
        fs.fail("write", errno.ENOSPC, match="/snap-")  # the snapshot file opens, its writes fail
        try:
            wal.maintain(eng, T)
            while wal.maintain(eng, T):
                pass
            raise AssertionError("the injected ENOSPC did not reach maintain")
        except OSError:
            pass
        # Then, with no new writes, compaction is still due and succeeds once room returns
        assert wal.compaction_due(eng)
        fs.heal()
        while wal.maintain(eng, T):
            pass
        assert wal.snapshots_written == 1
        assert len(wal.log.segment_bounds()) == 1  # the dead WAL was retired
    finally:
        wal.close()


def test_a_clean_stop_snapshots_so_the_restart_replays_nothing(tmp_path: Path) -> None:
    with Wal.open(tmp_path, durability="never", segment_size=65536, background=False) as wal:
        eng = churn(wal, 500)
        assert wal.final_snapshot(eng) is None
    with Wal.open(tmp_path, durability="never", segment_size=65536) as wal:
        eng2, info = wal.recover(now=T)
        assert info.records_replayed == 0 and info.snapshot is not None
        assert not eng2.jobs and eng2.next_id == 501


def test_a_stop_snapshot_without_room_is_reported_not_raised(tmp_path: Path) -> None:
    fs = Faults()
    with Wal.open(tmp_path, durability="never", segment_size=65536, background=False, fs=fs) as wal:
        eng = churn(wal, 50)
        fs.fail("open", errno.ENOSPC, match="/snap-")
        why = wal.final_snapshot(eng)
        assert why is not None and "No space" in why
    with Wal.open(tmp_path, durability="never", segment_size=65536) as wal:
        _, info = wal.recover(now=T)
        assert info.records_replayed == 100  # the WAL is complete: nothing was lost


def test_a_stop_on_a_full_disk_snapshots_into_the_reserve(tmp_path: Path) -> None:
    """A clean stop on a full disk, with no put refused since the last snapshot (so the reserve
    was not yet the snapshot's to use): the stop's snapshot goes into the reserve, and the next
    start replays nothing. Before, it failed for lack of room and the start replayed the WAL
    since the last snapshot (tests/server/test_full_disk_clears.py failed now and then so)."""
    with small_tmpfs(tmp_path, "4m") as mnt:
        data = mnt / "data"
        with Wal.open(data, durability="never", segment_size=65536, background=False) as wal:
            eng = churn(wal, 200)
            while wal.maintain(eng, T, force=True):  # a snapshot, which keeps a reserve after it
                pass
            assert (data / "snapshots" / SNAP_RESERVE).exists()
            eng.connect(2, T)
            for _ in range(100):  # WAL since that snapshot
                out = eng.apply(2, Put(0, 0, 60, b"y" * 200), T)
                wal.write(out.records)
                (jid,) = [r.job_id for r in out.records]
                wal.write(eng.apply(2, Delete(jid), T).records)
            wal.sync()
            assert wal.space is not None and not wal.space.short
            # Given another process that takes every free byte
            hog = os.open(mnt / "hog", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                with pytest.raises(OSError) as full:
                    while True:
                        os.write(hog, b"\1" * 4096)
                assert full.value.errno == errno.ENOSPC
            finally:
                os.close(hog)
            # When the server stops, then its snapshot is written all the same
            assert wal.final_snapshot(eng) is None
        with Wal.open(data, durability="never", segment_size=65536) as wal:
            eng2, info = wal.recover(now=T)
            assert info.records_replayed == 0 and info.snapshot is not None
            assert not eng2.jobs and eng2.next_id == 301


def test_a_snapshot_that_cannot_write_its_header_leaves_no_file(tmp_path: Path) -> None:
    fs = Faults()
    with Wal.open(tmp_path, durability="never", segment_size=65536, background=False, fs=fs) as wal:
        eng = churn(wal, 50)
        fs.fail("write", errno.ENOSPC, match="/snap-")  # the file is made, its first write fails
        assert wal.final_snapshot(eng) is not None
        # a half-made file would hold its room (and inode) until the next start cleaned it up
        assert [n for n in os.listdir(tmp_path / "snapshots") if n.endswith(".tmp")] == []
