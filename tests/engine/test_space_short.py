"""Compaction while the disk is full (issue 11 item 3), through the file-system seam: a snapshot
that fails for lack of space leaves compaction due (it was reset before: the retry never ran
without new writes), and a clean stop's snapshot spares the next start the dead WAL."""

from __future__ import annotations

import errno
from pathlib import Path

from stalkd.engine import Engine
from stalkd.log.fs import Faults
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Delete, Put

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
