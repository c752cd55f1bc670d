"""A crash loop still compacts (issue 34 item 2): the snapshot trigger counts the WAL written since
the last snapshot, as recovery finds it, not only what this process wrote. Each cycle opens the
data directory, runs the server's maintenance as it does at start and after each step, writes a
steady workload (puts and deletes: the live data stays the same) smaller than a snapshot's worth,
and dies as kill -9 leaves it (``Wal.abandon``). bench/crashloop_bench.py does the same with a
real server and real kill -9, printing the curve."""

from __future__ import annotations

from pathlib import Path

from stalkd.engine import Engine
from stalkd.log.frame import frame_size
from stalkd.persist.compaction import TAIL_SHARE, snapshot_due
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Delete, Put

from .walutil import T0

SEG = 64 * 1024
LIVE = 50  # jobs kept live
BODY = 200
PER_CYCLE = 100  # puts (and as many deletes) per cycle: ~40 KiB of WAL, under a segment
CYCLES = 30


def settle(wal: Wal, e: Engine) -> None:
    """The server's maintenance until it has nothing left to do (a snapshot finished)."""
    while wal.maintain(e, T0):
        pass


def cycle(d: Path, first_id: int) -> tuple[int, int, int]:
    """One run: recover, maintain, the workload, abandon. (WAL bytes at its end, live bytes, records
    replayed at its start)."""
    wal = Wal.open(d, durability="never", segment_size=SEG, background=False)
    e, info = wal.recover(T0)
    settle(wal, e)
    e.connect(1, T0)
    nxt = first_id
    for _ in range(PER_CYCLE):
        out = e.apply(1, Put(0, 0, 60, b"b" * BODY), T0)
        wal.write(out.records)
        if len(e.jobs) > LIVE:
            wal.write(e.apply(1, Delete(min(e.jobs)), T0).records)
        nxt += 1
        wal.maintain(e, T0)
    settle(wal, e)
    wal_bytes = sum(frame_size(len(f.bytes())) for f in wal.log.read(0))
    live = e.body_bytes + 100 * len(e.jobs)
    wal.abandon()
    return wal_bytes, live, info.records_replayed


def test_wal_stays_bounded_over_a_crash_loop(tmp_path: Path) -> None:
    seen = []
    for k in range(CYCLES):
        seen.append(cycle(tmp_path, k * PER_CYCLE))
    # Then the WAL never outgrows twice the live data and two segments, however many cycles
    worst = max(w - (2 * live + 2 * SEG) for w, live, _ in seen)
    assert worst <= 0, seen
    # And recovery replays at most about one snapshot interval (plus the records of one run)
    assert max(r for _, _, r in seen) < 2 * (SEG // BODY) + 2 * PER_CYCLE, seen
    # And what is left is the live jobs, nothing lost
    with Wal.open(tmp_path, durability="never", segment_size=SEG) as wal:
        e, _ = wal.recover(T0)
        assert len(e.jobs) == LIVE


def test_a_crash_loop_of_puts_alone_replays_at_most_a_share_of_the_jobs(tmp_path: Path) -> None:
    """Jobs nobody takes (the live data only grows) reach snapshots too: killed after each run of
    puts, every start replays at most about a ``TAIL_SHARE``-th (a half) of the live jobs one
    record at a time; with no snapshot (the trigger of two stops ago) it was all of them."""
    per_cycle, cycles = 150, 40
    seen = []
    for _ in range(cycles):
        wal = Wal.open(tmp_path, durability="never", segment_size=SEG, background=False)
        e, info = wal.recover(T0)
        seen.append((info.records_replayed, info.jobs))
        settle(wal, e)
        e.connect(1, T0)
        for _ in range(per_cycle):
            wal.write(e.apply(1, Put(0, 0, 60, b"b" * BODY), T0).records)
            wal.maintain(e, T0)
        settle(wal, e)
        wal.abandon()
    assert seen[-1][1] == (cycles - 1) * per_cycle  # nothing lost
    # A put's WAL frame weighs about what it adds to the live data (body + 100), so the tail
    # holds about a share of the jobs at most, once the live data outweighs a segment several times.
    late = [(r, n) for r, n in seen if n * (BODY + 100) > 8 * SEG]
    assert late and max(r / n for r, n in late) <= 1.15 / TAIL_SHARE, seen


def test_a_snapshot_is_due_at_a_share_of_the_live_data() -> None:
    """The rule alone (no WAL): a share of the live data, a segment at least; while short of
    space, the live data itself (dead WAL then goes at once)."""
    seg = 4 << 20
    assert not snapshot_due(seg - 1, 0, seg)
    assert snapshot_due(seg, 0, seg)
    live = 1 << 30
    assert not snapshot_due(live // TAIL_SHARE - 1, live, seg)
    assert snapshot_due(live // TAIL_SHARE, live, seg)
    assert not snapshot_due(live - 1, live, seg, short=True)
    assert snapshot_due(live, live, seg, short=True)
    assert not snapshot_due(0, 0, seg, short=True)
