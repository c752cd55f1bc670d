"""WAL persistence: restart semantics (docs/protocol.md, "Persistence"), snapshots, compaction, restart equivalence."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from stalkd.engine import Engine
from stalkd.engine.space import SHORT_FRAME, put_frame
from stalkd.log.active import SPARES_DIR
from stalkd.log.fs import Faults
from stalkd.log.mark import read_mark
from stalkd.persist.idceiling import IDS_NAME
from stalkd.persist.snapshot import list_snapshots
from stalkd.persist.wal import Wal, WalError
from stalkd.protocol import commands as C

from .walutil import T0, Driver, durable_view, random_step


def reopen(path: Path, now: float, durability: str = "never", **kw: object) -> tuple[Wal, Driver]:
    # "never" still writes every record before returning (it survives a process crash); these
    # tests check what is written, and per-record fsyncs would only make them slow.
    wal = Wal.open(path, durability=durability, **kw)  # type: ignore[arg-type]
    e, _ = wal.recover(now)
    return wal, Driver(wal, e, now)


def test_empty_directory_recovers_to_a_fresh_engine(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0)
    assert not d.e.jobs and d.e.next_id == 1
    assert wal.stats()["binlog-records-written"] == 0
    wal.close()


def test_binlog_read_back(tmp_path: Path) -> None:
    # cttest_binlog_read: job 1 released with delay 1, job 2 deleted; after restart job 1 can
    # be reserved and `delete 2` is NOT_FOUND.
    wal, d = reopen(tmp_path, T0, durability="always")
    assert d.do(1, C.Put(0, 0, 100, b"a")) == C.Reply("INSERTED", (1,))
    assert d.do(1, C.Put(0, 0, 100, b"b")) == C.Reply("INSERTED", (2,))
    d.do(1, C.Reserve())
    assert d.do(1, C.Release(1, 0, 1)) == C.Reply("RELEASED")
    assert d.do(1, C.Delete(2)) == C.Reply("DELETED")
    wal.close()
    wal, d = reopen(tmp_path, T0 + 2)
    assert d.do(1, C.ReserveWithTimeout(0)) == C.JobReply("RESERVED", 1, b"a")
    assert d.do(1, C.Delete(2)) == C.Reply("NOT_FOUND")
    assert d.do(1, C.Put(0, 0, 5, b"c")) == C.Reply("INSERTED", (3,))  # ids continue
    wal.close()


def test_restart_keeps_states_deadlines_and_counters(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0)
    for body in (b"ready", b"reserved", b"buried", b"delayed", b"rj-delayed"):
        d.do(1, C.Put(10, 0, 60, body))
    d.do(1, C.Put(10, 100, 60, b"late"))  # 6: delayed 100 s
    d.do(2, C.ReserveJob(2))
    d.do(2, C.ReserveJob(3))
    d.do(2, C.Bury(3, 77))
    d.do(2, C.ReserveJob(4))
    d.do(2, C.Release(4, 5, 50))
    d.do(2, C.ReserveJob(6))  # reserved from delayed: comes back ready
    before = durable_view(d.e)
    wal.close()
    wal, d2 = reopen(tmp_path, T0 + 10)
    assert durable_view(d2.e) == before
    st = {j: d2.e.jobs[j].state.name for j in d2.e.jobs}
    assert st == {1: "READY", 2: "READY", 3: "BURIED", 4: "DELAYED", 5: "READY", 6: "READY"}
    assert d2.e.jobs[4].deadline_us == round((T0 + 50) * 1e6)  # wall-clock deadline kept
    assert (d2.e.jobs[3].pri, d2.e.jobs[3].buries, d2.e.jobs[2].reserves) == (77, 1, 1)
    wal.close()
    wal, d3 = reopen(tmp_path, T0 + 60)  # the delay ran out while the server was down
    assert d3.e.jobs[4].state.name == "READY"
    wal.close()


@pytest.mark.parametrize("seed", range(6))
def test_restart_equivalence_random_histories(tmp_path: Path, seed: int) -> None:
    """Random history, snapshots taken incrementally (a few jobs per step) at random points,
    restarts at random points: the recovered durable state always equals the live one."""
    rng = random.Random(seed)
    kw = dict(segment_size=4096, compact_min_bytes=rng.choice([0, 2000, 10**9]), chunk_jobs=3,
              background=False)  # fmt: skip
    wal, d = reopen(tmp_path, T0, **kw)
    for _ in range(4):
        for _ in range(rng.randint(50, 250)):
            random_step(d, rng)
            if rng.random() < 0.5:
                wal.maintain(d.e, d.now)
        if rng.random() < 0.3:
            wal.snapshot(d.e)
        expect = durable_view(d.e)
        next_id = d.e.next_id
        now = d.now
        wal.close()
        wal, d = reopen(tmp_path, now, **kw)
        d.e.tick(now)
        assert durable_view(d.e) == expect
        assert d.e.next_id >= next_id - 1  # ids of failed puts (never logged) may be reused
    wal.close()


def test_snapshot_covers_history_and_drops_segments(tmp_path: Path) -> None:
    wal, d = reopen(
        tmp_path, T0, segment_size=4096, compact_min_bytes=0, chunk_jobs=5, background=False
    )
    for i in range(200):
        d.do(1, C.Put(0, 0, 60, b"x" * 20))
        if i % 3 == 0:
            d.do(1, C.Delete(i))
    segs_before = len(wal.log.segment_bounds())
    wal.snapshot(d.e)
    assert len(wal.log.segment_bounds()) < segs_before
    assert len(list_snapshots(wal.snap_dir)) == 1
    expect = durable_view(d.e)
    wal.close()
    wal, d = reopen(tmp_path, d.now)
    assert durable_view(d.e) == expect
    wal.close()


def test_background_snapshot_while_writing(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0, segment_size=8192, compact_min_bytes=4096, chunk_jobs=7)
    rng = random.Random(7)
    for _ in range(1500):
        random_step(d, rng)
        wal.maintain(d.e, d.now)
    assert wal.snapshots_written > 0
    wal.snapshot(d.e)  # wait for / finish the current one
    expect = durable_view(d.e)
    now = d.now
    wal.close()
    wal, d = reopen(tmp_path, now)
    d.e.tick(now)
    assert durable_view(d.e) == expect
    wal.close()


def test_disk_stays_bounded_under_release_with_delay_churn(tmp_path: Path) -> None:
    seg = 16384
    # background=False: each snapshot completes inside the maintain() call that finishes it, so
    # the peak does not depend on how fast a thread's fsyncs are compared with this loop.
    wal, d = reopen(tmp_path, T0, segment_size=seg, chunk_jobs=16, background=False)
    for _ in range(50):
        d.do(1, C.Put(0, 0, 60, bytes(100)))
    d.do(1, C.Reserve())
    d.do(1, C.Bury(1, 0))  # a job buried for the whole run
    peak = 0
    for cycle in range(3000):
        jid = 2 + cycle % 49
        d.do(1, C.ReserveJob(jid))
        d.do(1, C.Release(jid, 0, 3600))
        wal.maintain(d.e, d.now)
        peak = max(peak, wal.disk_bytes())
    live = d.e.body_bytes + 100 * len(d.e.jobs)
    assert wal.snapshots_written >= 3
    assert peak <= 2 * live + 4 * seg + 8192, (peak, live)
    assert wal.log.segment_bounds()[0][0] > 0  # early segments are gone
    expect = durable_view(d.e)
    wal.close()
    wal, d = reopen(tmp_path, d.now)
    assert durable_view(d.e) == expect
    wal.close()


def test_incomplete_snapshot_is_ignored(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0, background=False)
    d.do(1, C.Put(0, 0, 60, b"a"))
    wal.snapshot(d.e)
    d.do(1, C.Put(0, 0, 60, b"b"))
    expect = durable_view(d.e)
    wal.close()
    snaps = list_snapshots(os.path.join(tmp_path, "snapshots"))
    bogus = Path(snaps[0]).with_name("snap-99999999999999999999.snap")
    bogus.write_bytes(Path(snaps[0]).read_bytes()[:-3])  # torn trailer
    (bogus.parent / "snap-00000000000000000777.snap.tmp").write_bytes(b"junk")
    wal = Wal.open(tmp_path)
    e, info = wal.recover(T0)
    assert durable_view(e) == expect
    assert str(bogus) in info.discarded and "snap-00000000000000000777.snap.tmp" in info.discarded
    wal.close()


def test_missing_snapshot_with_dropped_segments_is_a_clear_error(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0, segment_size=4096, compact_min_bytes=0, background=False)
    for _ in range(100):
        d.do(1, C.Put(0, 0, 60, b"x" * 50))
    wal.snapshot(d.e)
    wal.close()
    for p in list_snapshots(os.path.join(tmp_path, "snapshots")):
        os.unlink(p)
    wal = Wal.open(tmp_path)
    with pytest.raises(WalError, match="WAL starts at offset"):
        wal.recover(T0)
    wal.close()


def test_put_restart_delete(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0, durability="always")
    d.do(1, C.Put(0, 0, 100, b"a"))
    d.do(1, C.Reserve())  # reserved at shutdown: comes back ready
    wal.close()
    wal, d = reopen(tmp_path, T0 + 1)
    assert d.do(1, C.Delete(1)) == C.Reply("DELETED")
    wal.close()
    wal, d = reopen(tmp_path, T0 + 2)
    assert not d.e.jobs and d.do(1, C.Put(0, 0, 1, b"b")) == C.Reply("INSERTED", (2,))
    wal.close()


def test_tiny_segments_96_puts_then_96_deletes(tmp_path: Path) -> None:
    # testserv's 601-byte binlog files: every put and delete still succeeds when each segment
    # holds only a couple of records (the smallest segment stalkd.log accepts: 64+48+64 bytes
    # plus room for a frame of the largest record here).
    wal, d = reopen(
        tmp_path, T0, segment_size=601, compact_min_bytes=0, chunk_jobs=8, background=False
    )
    for i in range(1, 97):
        assert d.do(1, C.Put(0, 0, 120, b"job %d" % i)) == C.Reply("INSERTED", (i,))
        wal.maintain(d.e, d.now)
    for i in range(1, 97):
        assert d.do(1, C.Delete(i)) == C.Reply("DELETED")
        wal.maintain(d.e, d.now)
    wal.close()
    wal, d = reopen(tmp_path, d.now)
    # "never" keeps a durable id ceiling: a restart without a clean stop goes on from it
    ceiling = read_mark(str(tmp_path), name=IDS_NAME) or 0
    assert not d.e.jobs and d.e.next_id == max(97, ceiling) and ceiling > 96
    wal.close()


class _Disk(Faults):
    """The file system, with the WAL's spare-segment allocation failing (ENOSPC) while ``full``."""

    @property
    def full(self) -> bool:
        return bool(self._full)

    @full.setter
    def full(self, value: bool) -> None:
        self._full = value
        self.heal()
        if value:
            self.fail("allocate", errno.ENOSPC, match=f"/{SPARES_DIR}/")

    @property
    def refused(self) -> int:
        return self.failures.get("allocate", 0)

    _full = False


def _admitted(wal: Wal, e: Engine, cmd: C.Command, cost: int) -> C.AnyReply | None:
    """What the server does: promise room, apply, settle, write; None when refused."""
    if not wal.admit(cost):
        return None
    out = e.apply(1, cmd, T0)
    wal.settle(cost, out.records)
    wal.write(out.records)
    return out.reply


def test_injected_allocation_failure_refuses_puts_but_never_deletes(tmp_path: Path) -> None:
    disk = _Disk()
    wal = Wal.open(
        tmp_path, durability="never", segment_size=8192, compact_min_bytes=10**9, fs=disk
    )
    e, _ = wal.recover(T0, max_job_size=1024)
    e.connect(1, T0)
    body = b"b" * 10
    cost = put_frame(len(body)) + SHORT_FRAME
    for i in range(1, 301):  # their deletes need more than a segment: spares hold that room
        assert _admitted(wal, e, C.Put(0, 0, 60, body), cost) == C.Reply("INSERTED", (i,))
    # Given the disk is full from now on: puts go on only while promised room lasts
    disk.full = True
    n = 0
    while _admitted(wal, e, C.Put(0, 0, 60, body), cost) is not None:
        n += 1
        assert n < 1000, "puts never refused"
    sp = wal.space
    assert sp is not None and disk.refused >= 1
    assert sp.room() - sp.promised < cost  # refused exactly at the boundary
    jobs, promised, seq = set(e.jobs), sp.promised, e.seq
    # A refused put changed nothing and promised nothing
    assert _admitted(wal, e, C.Put(0, 0, 60, body), cost) is None
    assert (set(e.jobs), sp.promised, e.seq) == (jobs, promised, seq)
    # Every job can still be deleted: each delete's room was promised by its put
    segments = len(wal.log.segment_bounds())
    for jid in sorted(jobs):
        assert _admitted(wal, e, C.Delete(jid), 0) == C.Reply("DELETED")
    assert len(wal.log.segment_bounds()) > segments  # the deletes needed a new segment
    assert sp.promised == 0  # every promise spent, none leaked
    # Once space returns, puts work again
    disk.full = False
    nid = e.next_id
    assert _admitted(wal, e, C.Put(0, 0, 60, b"back"), cost) == C.Reply("INSERTED", (nid,))
    wal.close()
    wal2 = Wal.open(tmp_path)
    e2, _ = wal2.recover(T0 + 1)
    assert sorted(e2.jobs) == [nid] and e2.jobs[nid].body == b"back"
    wal2.close()


def test_kick_is_bounded_by_the_room_left(tmp_path: Path) -> None:
    disk = _Disk()
    wal = Wal.open(
        tmp_path, durability="never", segment_size=4096, compact_min_bytes=10**9, fs=disk
    )
    wal.recover(T0)
    disk.full = True
    sp = wal.space
    assert sp is not None
    free = sp.room() - sp.promised
    # Only as many kick records as fit are promised; the rest of the bound is refused
    got = wal.admit_upto(10**6, SHORT_FRAME)
    assert got == free // SHORT_FRAME and sp.room() - sp.promised < SHORT_FRAME
    assert wal.admit_upto(5, SHORT_FRAME) == 0
    wal.settle(got * SHORT_FRAME, ())  # nothing kicked: the promise is returned
    assert sp.promised == 0
    wal.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_promises_never_exceed_room_over_random_histories(tmp_path: Path, seed: int) -> None:
    """Server-like admission over random commands while the disk fills and empties: promised
    bytes never exceed the room, a refused command changes nothing, and a restart gives back
    every job in its durable state."""
    rng = random.Random(seed)
    disk = _Disk()
    wal = Wal.open(
        tmp_path, durability="never", segment_size=2048, compact_min_bytes=10**9, fs=disk
    )
    e, _ = wal.recover(T0, max_job_size=256)
    sp = wal.space
    assert sp is not None
    for cid in (1, 2):
        e.connect(cid, T0)
    refused = 0
    for _ in range(1500):
        if rng.random() < 0.05:
            disk.full = not disk.full
        cid = rng.choice((1, 2))
        jid = rng.randint(max(1, e.next_id - 20), e.next_id)
        k = rng.random()
        cmd: C.Command
        if k < 0.35:
            cmd = C.Put(
                rng.randint(0, 9), rng.choice([0, 0, 5]), 60, rng.randbytes(rng.randint(0, 200))
            )
            cost = put_frame(len(cmd.body)) + SHORT_FRAME
        elif k < 0.55:
            cmd, cost = C.ReserveWithTimeout(0), 0
        elif k < 0.7:
            cmd, cost = C.Delete(jid), 0
        elif k < 0.8:
            cmd, cost = C.Bury(jid, 1), SHORT_FRAME
        elif k < 0.9:
            cmd, cost = C.Release(jid, 2, rng.choice([0, 3])), SHORT_FRAME
        else:
            n = wal.admit_upto(rng.randint(1, 4), SHORT_FRAME)
            cmd, cost = C.Kick(n), n * SHORT_FRAME
        seq = e.seq
        if cost and not isinstance(cmd, C.Kick) and not wal.admit(cost):
            refused += 1
            assert e.seq == seq
        else:
            out = e.apply(cid, cmd, T0)
            wal.settle(cost, out.records)
            wal.write(out.records)
        assert sp.promised <= sp.room()
    assert refused > 0  # the disk really was full at times
    expect = {jid: (j.state, j.pri) for jid, j in e.jobs.items()}
    wal.close()
    wal2 = Wal.open(tmp_path)
    e2, _ = wal2.recover(T0)
    # Reserved jobs come back ready (docs/protocol.md, "Persistence")
    got = {jid: (j.state, j.pri) for jid, j in e2.jobs.items()}
    assert {
        jid: (s if s.name != "RESERVED" else s.READY, p) for jid, (s, p) in expect.items()
    } == got
    wal2.close()


def test_a_snapshot_step_stops_at_chunk_bytes_of_bodies(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0, compact_min_bytes=0, chunk_jobs=100, background=False)
    wal.chunk_bytes = 10_000  # a class default of CHUNK_BYTES; this test sets its own
    for _ in range(30):
        d.do(1, C.Put(0, 0, 60, b"b" * 4000))
    for _ in range(300):
        d.do(1, C.Put(0, 0, 60, b"s"))
    # Given a snapshot begun over 30 big and 300 small jobs
    assert wal.maintain(d.e, d.now, force=True)
    steps = []
    while wal._snap is not None and wal._snap.thread is None:
        before = wal._snap.pos
        wal.maintain(d.e, d.now)
        steps.append((wal._snap.pos if wal._snap is not None else 330) - before)
    # Then big bodies go 3 per step (the third crosses 10,000 bytes), small ones chunk_jobs per
    # step, and every job is copied once
    assert steps[:10] == [3] * 10
    assert max(steps) == 100 and sum(steps) == 330
    expect = durable_view(d.e)
    wal.close()
    wal, d = reopen(tmp_path, d.now)
    assert durable_view(d.e) == expect
    wal.close()
