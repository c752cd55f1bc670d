"""Jobs recovered with their bodies still in the snapshot block or WAL window they were read from
(``objects.new_lazy_job``): every command on such a job, not touched since the restart, behaves
as on the same job with its body already a ``bytes`` of its own, and a buffer is let go once no
job holds a body in it."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stalkd.engine import Engine
from stalkd.engine.objects import job_body
from stalkd.persist.wal import Wal
from stalkd.protocol import commands as C

from .walutil import T0, Driver, durable_view

# What the data directory holds, by job id: (tube, state, where it comes back from).
SNAP_READY, SNAP_READY_B, SNAP_DELAYED, SNAP_BURIED = 1, 2, 3, 5
TAIL_READY, TAIL_DELAYED, TAIL_BURIED, TAIL_READY_U = 7, 8, 9, 11
BODIES = {jid: b"body-%d-" % jid * jid for jid in range(1, 12)}


def _build(root: Path) -> None:
    """A directory killed after: jobs 1-6 put and snapshotted (ready, delayed, buried ones), then
    jobs 7-11 put after the snapshot (the WAL tail); a few of each deleted."""
    wal = Wal.open(root, durability="never", background=False)
    e, _ = wal.recover(T0)
    d = Driver(wal, e)

    def put(jid: int, pri: int, delay: int, tube: str = "default") -> None:
        d.do(1, C.Use(tube))
        reply = d.do(1, C.Put(pri, delay, 60, BODIES[jid]))
        assert reply == C.Reply("INSERTED", (jid,))

    def bury(jid: int) -> None:
        assert isinstance(d.do(2, C.ReserveJob(jid)), C.JobReply)
        assert d.do(2, C.Bury(jid, 7)) == C.Reply("BURIED")

    put(1, 5, 0)
    put(2, 2000, 0)
    put(3, 5, 120)
    put(4, 5, 0)
    put(5, 9, 0)
    put(6, 1, 0)
    bury(SNAP_BURIED)
    d.do(1, C.Delete(4))
    wal.snapshot(e)
    put(7, 3, 0)
    put(8, 4, 90)
    put(9, 6, 0)
    put(10, 6, 0)
    put(11, 0, 0, "u")
    bury(TAIL_BURIED)
    d.do(1, C.Delete(10))
    d.do(1, C.Delete(6))
    wal.abandon()  # a kill: the snapshot and the WAL tail after it come back


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lazy") / "data"
    _build(root)
    return root


def _recover(killed: Path, to: Path) -> tuple[Wal, Engine]:
    shutil.copytree(killed, to)
    wal = Wal.open(to, durability="never", background=False)
    e, info = wal.recover(T0 + 1)
    assert info.snapshot_jobs > 0 and info.records_replayed > 0  # both paths make jobs
    return wal, e


def _lazy(e: Engine) -> set[int]:
    return {jid for jid, j in e.jobs.items() if j.bat >= 0}


LIVE = {SNAP_READY, SNAP_READY_B, SNAP_DELAYED, SNAP_BURIED, TAIL_READY, TAIL_DELAYED, TAIL_BURIED, TAIL_READY_U}

# Each scenario: the commands of one connection (1, watching default and u), one at a time, after
# a restart. The first command's job (or the job it finds) has not been touched since the restart.
Step = C.Command | float  # a float: the clock moves on that many seconds (a tick)
SCENARIOS: dict[str, list[Step]] = {
    "reserve": [C.Reserve(), C.Reserve(), C.Reserve()],
    "reserve-with-timeout": [C.ReserveWithTimeout(0), C.ReserveWithTimeout(0)],
    "reserve-job snapshot ready": [C.ReserveJob(SNAP_READY_B)],
    "reserve-job snapshot delayed": [C.ReserveJob(SNAP_DELAYED)],
    "reserve-job snapshot buried": [C.ReserveJob(SNAP_BURIED)],
    "reserve-job tail ready": [C.ReserveJob(TAIL_READY)],
    "reserve-job tail delayed": [C.ReserveJob(TAIL_DELAYED)],
    "reserve-job tail buried": [C.ReserveJob(TAIL_BURIED)],
    "peek each": [C.Peek(jid) for jid in sorted(LIVE)] + [C.Peek(4), C.Peek(10)],
    "peek-ready": [C.Use("default"), C.PeekReady(), C.Use("u"), C.PeekReady()],
    "peek-delayed": [C.PeekDelayed()],
    "peek-buried": [C.PeekBuried()],
    "delete each": [C.Delete(jid) for jid in sorted(LIVE)] + [C.Stats()],
    "kick buried": [C.Kick(10), C.Reserve(), C.Reserve()],
    "kick delayed": [C.Delete(SNAP_BURIED), C.Delete(TAIL_BURIED), C.Kick(10), C.PeekReady()],
    "kick-job": [C.KickJob(SNAP_BURIED), C.KickJob(TAIL_DELAYED), C.KickJob(SNAP_READY), C.PeekReady()],
    "stats-job each": [C.StatsJob(jid) for jid in sorted(LIVE)],
    "release": [C.ReserveJob(TAIL_READY), C.Release(TAIL_READY, 1, 0), C.Reserve(),
                C.Release(TAIL_READY, 1, 5), C.PeekDelayed()],  # fmt: skip
    "bury": [C.ReserveJob(SNAP_READY), C.Bury(SNAP_READY, 3), C.PeekBuried(), C.Kick(1), C.Reserve()],
    "touch": [C.ReserveJob(TAIL_READY_U), C.Touch(TAIL_READY_U), C.Delete(TAIL_READY_U)],
    "delays end": [200.0, C.Reserve(), C.Reserve(), C.Reserve(), C.Reserve()],
    "ttr ends": [C.Reserve(), 61.0, C.Reserve(), C.PeekReady()],
    "stats-tube": [C.StatsTube("default"), C.StatsTube("u"), C.PauseTube("default", 10), C.Reserve(),
                   C.ListTubes()],  # fmt: skip
}


def _run(e: Engine, steps: list[Step], check: Callable[[Engine], None] | None = None) -> list[Any]:
    """Every reply and record of ``steps`` on a fresh connection 1 watching default and u."""
    now = T0 + 1
    out: list[Any] = []
    e.connect(1, now)
    for cmd in (C.Watch("u"),):
        e.apply(1, cmd, now)
    for step in steps:
        if isinstance(step, float):
            now += step
            o = e.tick(now)
        else:
            if check is not None:
                check(e)
            o = e.apply(1, step, now)
        out.append((o.reply, o.records, o.wakeups))
    return out


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_command_on_an_untouched_recovered_job(killed: Path, tmp_path: Path, name: str) -> None:
    steps = SCENARIOS[name]
    wal_lazy, lazy = _recover(killed, tmp_path / "lazy")
    wal_eager, eager = _recover(killed, tmp_path / "eager")
    try:
        assert _lazy(lazy) == LIVE, "every recovered job holds its body in a buffer until read"
        for j in eager.jobs.values():
            job_body(j)  # the reference: every body a bytes of its own, as before lazy bodies
        assert not _lazy(eager)
        assert lazy.body_bytes == eager.body_bytes == sum(len(BODIES[jid]) for jid in LIVE)

        first = True

        def untouched(e: Engine) -> None:
            nonlocal first
            if first:  # the scenario's first command finds its job as recovered
                assert _lazy(e) == LIVE
                first = False

        assert _run(lazy, steps, untouched) == _run(eager, steps)
        assert durable_view(lazy) == durable_view(eager)
        assert lazy.body_bytes == eager.body_bytes
        assert {jid: j.body for jid, j in lazy.jobs.items()} == {jid: BODIES[jid] for jid in lazy.jobs}
    finally:
        wal_lazy.abandon()
        wal_eager.abandon()


def test_a_snapshot_copies_untouched_bodies_and_frees_their_buffers(killed: Path, tmp_path: Path) -> None:
    wal, e = _recover(killed, tmp_path / "a")
    expect = durable_view(e)
    wal.snapshot(e)  # a snapshot taken before any job was touched
    assert not _lazy(e), "copying a job into a snapshot gives it a body of its own"
    wal.close()
    with Wal.open(tmp_path / "a", durability="never", background=False) as wal2:
        e2, info = wal2.recover(T0 + 2)
        assert info.records_replayed == 0 and _lazy(e2) == LIVE
        assert durable_view(e2) == expect
        assert {jid: j.body for jid, j in e2.jobs.items()} == {jid: BODIES[jid] for jid in LIVE}


def test_a_buffer_lives_while_a_job_holds_a_body_in_it(killed: Path, tmp_path: Path) -> None:
    wal, e = _recover(killed, tmp_path / "a")
    try:
        e.connect(9, T0 + 1)
        by_buffer: dict[int, tuple[bytes, list[int]]] = {}
        for jid in sorted(LIVE):
            buf = e.jobs[jid].bdata
            by_buffer.setdefault(id(buf), (buf, []))[1].append(jid)
        assert len(by_buffer) >= 2  # the snapshot's blocks and the tail's window
        for buf, ids in by_buffer.values():
            held = sys.getrefcount(buf)
            for i, jid in enumerate(ids):
                if i % 2:
                    job_body(e.jobs[jid])  # a reserve or a peek reads it
                else:
                    assert e.apply(9, C.Delete(jid), T0 + 1).reply == C.Reply("DELETED")
                assert sys.getrefcount(buf) == held - i - 1, "each job lets go of it"
    finally:
        wal.abandon()
