"""Jobs that all stay live reach a snapshot (issue 34): a restart loads a snapshot's jobs in bulk
but replays the WAL a record at a time, and puts alone never made the WAL outweigh the live data.
bench/restart_bench.py measures what it gives a restart."""

from __future__ import annotations

from pathlib import Path

from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Put

from .walutil import T0

SEG = 64 * 1024


def test_puts_nobody_takes_are_snapshotted_and_replay_stays_a_fraction(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path, durability="never", segment_size=SEG, background=False)
    e, _ = wal.recover(T0)
    e.connect(1, T0)
    n = 5000  # ~1 MB of puts: sixteen segments
    for i in range(n):
        wal.write(e.apply(1, Put(0, 0, 60, b"x" * 100), T0).records)
        if i % 100 == 99:
            while wal.maintain(e, T0):
                pass
    assert wal.snapshots_written >= 2
    wal.abandon()
    with Wal.open(tmp_path, durability="never", segment_size=SEG) as again:
        _, info = again.recover(T0)
    assert info.jobs == n
    # Then most jobs come from the snapshot: the tail replayed is at most about as long as the snapshot (it snapshots as the live data about doubles)
    assert info.snapshot_jobs > 0 and info.records_replayed <= 1.5 * info.snapshot_jobs, info


def test_a_stop_during_a_snapshot_leaves_nothing_to_replay(tmp_path: Path) -> None:
    # Given a snapshot begun (its jobs not yet copied), then more puts and deletes written
    wal = Wal.open(tmp_path, durability="never", segment_size=SEG)
    e, _ = wal.recover(T0)
    e.connect(1, T0)
    for _ in range(200):
        wal.write(e.apply(1, Put(0, 0, 60, b"x" * 100), T0).records)
    assert wal.maintain(e, T0, force=True)  # in progress
    later: list[int] = []
    for _ in range(50):
        out = e.apply(1, Put(0, 0, 60, b"y" * 100), T0)
        wal.write(out.records)
        later.append(int(out.reply.args[0]))
    # When the server stops cleanly (the snapshot at stop finishes the one in progress)
    assert wal.final_snapshot(e) is None
    wal.close()
    # Then the next start loads every job from a snapshot and replays nothing (the one begun
    # before the last puts alone left them to replay)
    with Wal.open(tmp_path, durability="never", segment_size=SEG) as again:
        e2, info = again.recover(T0)
    assert info.jobs == 250 and set(later) <= set(e2.jobs)
    assert info.records_replayed == 0, info
