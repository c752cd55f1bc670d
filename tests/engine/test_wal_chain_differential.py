"""Differential test of the WAL's write chain: the compiled one (stalkd.engine._wal's Wal.write
over stalkd.log._write's Log.write_many) against the references (wal.py, log.py, writer.py,
active.py, fs.py), each into a real WAL directory of its own.

The same seeded engine mutations, batched as the server batches them, go through both chains
with the same clock, room promised for each command and settled after it (Wal.admit and
Wal.settle, compiled too); the room promised must be the same after every command, the segment
files identical byte for byte, and they must recover to the same state. With faults injected through the file-system seam (stalkd/log/fs.py: ENOSPC and EIO on a
write, EIO on fdatasync, short writes) the compiled chain must hand every call to the reference
(so the faults fire) and both must give the same outcome: the same refusals, and after a
restart every acknowledged change still there. A real failing descriptor (EBADF, no seam
involved) checks the compiled path's own error handling against the reference's. Skipped when
the compiled chain is not built (the Makefile's pure rerun runs the references' own tests).
"""

from __future__ import annotations

import errno
import itertools
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from stalkd.engine import Engine
from stalkd.engine.model import Record
from stalkd.engine.space import SHORT_FRAME, put_frame
from stalkd.log import fastwrite
from stalkd.log.fs import REAL, Faults, FileSystem
from stalkd.persist import fastwal
from stalkd.persist.wal import Wal
from stalkd.protocol import commands as C

from .walutil import T0, durable_view

pytestmark = pytest.mark.skipif(fastwal.IMPLEMENTATION != "c" or fastwrite.IMPLEMENTATION != "c",
                                reason="the compiled WAL chain is not built (or STALKD_NO_EXTENSIONS=1)")


@contextmanager
def chain(compiled: bool) -> Iterator[None]:
    fastwal.set_compiled(compiled)
    fastwrite.set_compiled(compiled)
    try:
        yield
    finally:
        fastwal.set_compiled(True)
        fastwrite.set_compiled(True)


def clock() -> Callable[[], int]:
    """Nanoseconds that step by 1 µs per call: two chains asking as often get the same stamps."""
    return itertools.count(1_700_000_000_000_000_000, 1000).__next__


def batches(seed: int, n: int) -> Iterator[list[Any]]:
    """Lists of (connection, command) run as one loop iteration: puts of sizes that cross
    segment and zeroing boundaries, reserves (analytics records), deletes, releases, buries, kicks."""
    rng = random.Random(seed)
    for _ in range(n):
        batch: list[Any] = []
        for _ in range(rng.choice([1, 1, 1, 2, 5])):
            cid = rng.randint(1, 3)
            k = rng.random()
            if k < 0.4:
                batch.append((cid, C.Put(rng.choice([0, 7]), 0, 60, rng.randbytes(rng.choice([0, 9, 100, 3000])))))
            elif k < 0.6:
                batch.append((cid, C.ReserveWithTimeout(0)))
            elif k < 0.8:
                batch.append((cid, "delete"))
            elif k < 0.88:
                batch.append((cid, "release"))
            elif k < 0.95:
                batch.append((cid, "bury"))
            else:
                batch.append((cid, C.Kick(2)))
        yield batch


HELD: dict[tuple[int, int], list[int]] = {}  # (engine, connection): ids it reserved
LEDGER: list[Any] = []  # each admission's answer and the room promised after it and its settle


def run(engine: Engine, wal: Wal, batch: list[Any], now: float) -> tuple[list[Record], Any]:
    """Apply one batch's commands; write (and sync) their records as the server does; the
    records and the write's outcome (None, or the error's type)."""
    records: list[Record] = []
    for cid, cmd in batch:
        if cid not in engine.conns:
            engine.connect(cid, now)
        held = HELD.setdefault((id(engine), cid), [])
        if isinstance(cmd, str):  # on a job this connection reserved (if its TTR has not run out)
            if not held:
                continue
            cmd = {"delete": C.Delete, "release": lambda j: C.Release(j, 3, 0), "bury": lambda j: C.Bury(j, 5)}[cmd](
                held.pop(0))  # fmt: skip
        # room promised first and settled after, as the server's admission does
        cost = put_frame(len(cmd.body)) + SHORT_FRAME if isinstance(cmd, C.Put) else 0
        ok = wal.admit(cost)
        LEDGER.append((ok, wal.space.promised if wal.space else None))
        if not ok:
            continue
        out = engine.apply(cid, cmd, now)
        wal.settle(cost, out.records)
        LEDGER.append(wal.space.promised if wal.space else None)
        if isinstance(out.reply, C.JobReply):
            held.append(out.reply.id)
        records.extend(out.records)
    try:
        wal.write(records)
        wal.sync()
    except Exception as e:
        return records, type(e).__name__
    return records, None


def files(d: Path) -> dict[str, bytes]:
    wal = d / "wal"
    # (MARK follows a timer, not the chain: stalkd.log.mark)
    return {p.name: p.read_bytes() for p in sorted(wal.iterdir()) if p.is_file() and p.name not in ("LOCK", "MARK")}


def drive(d: Path, compiled: bool, seed: int, n: int, durability: str, fs: FileSystem = REAL,
          fault: Callable[[Faults], None] | None = None, at: int = -1) -> list[Any]:
    """``n`` batches into a WAL in ``d`` through one chain (a fault armed before batch ``at``);
    each batch's outcome."""
    outcomes = []
    HELD.clear()
    LEDGER.clear()
    with chain(compiled):
        w = Wal.open(d, durability=durability, segment_size=64 * 1024, fs=fs, clock=clock())
        engine, _ = w.recover(now=T0)
        try:
            for i, batch in enumerate(batches(seed, n)):
                if i == at and fault is not None:
                    assert isinstance(fs, Faults)
                    fault(fs)
                _, out = run(engine, w, batch, T0 + i)
                outcomes.append(out)
                if out is not None:  # the server stops at a failed write or sync
                    break
        finally:
            w.abandon()  # what a crash leaves: no final snapshot, nothing flushed
    return outcomes


def recovered(d: Path) -> Any:
    with Wal.open(d, durability="never") as w:
        engine, _ = w.recover(now=T0 + 10_000)
        return durable_view(engine)


@pytest.mark.parametrize("durability", ["always", "never"])
@pytest.mark.parametrize("seed", range(6))
def test_same_segment_bytes_and_recovery(tmp_path: Path, seed: int, durability: str) -> None:
    before = fastwal.counts()[0], *fastwrite.counts()
    assert drive(tmp_path / "c", True, seed, 300, durability) == [None] * 300
    mid = fastwal.counts()[0], *fastwrite.counts()
    ledger = list(LEDGER)
    assert drive(tmp_path / "py", False, seed, 300, durability) == [None] * 300
    assert ledger == LEDGER and len(ledger) > 300  # the same room promised, command by command
    wal_writes, log_writes, syncs = mid[0] - before[0], mid[1] - before[1], mid[3] - before[3]
    assert wal_writes > 200 and log_writes > 200  # the compiled chain did write (most batches)
    assert (syncs > 200) == (durability == "always")  # and synced (all but batches already durable)
    after = fastwal.counts()[0], *fastwrite.counts()
    assert [after[i] for i in (0, 1, 3)] == [mid[i] for i in (0, 1, 3)]  # the reference run did not use it
    c, py = files(tmp_path / "c"), files(tmp_path / "py")
    assert len(c) >= 3  # roll-overs (the reference's) happened on the way
    assert c.keys() == py.keys()
    for name in c:
        assert c[name] == py[name], name
    assert recovered(tmp_path / "c") == recovered(tmp_path / "py")


FAULTS: dict[str, Callable[[Faults], None]] = {
    "enospc-write": lambda fs: fs.fail("pwrite", errno.ENOSPC, ".log", times=1),
    "eio-write": lambda fs: fs.fail("pwrite", errno.EIO, ".log", times=1),
    "eio-fdatasync": lambda fs: fs.fail("fdatasync", errno.EIO, ".log", times=1),
    "short-writes": lambda fs: fs.short_writes(7),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faults_through_the_seam_same_outcome(tmp_path: Path, fault: str) -> None:
    """The compiled chain declines a Faults seam, so the fault fires in both; the same batch is
    refused (or, short writes, every batch lands), the bytes and the recovery are the same, and
    every batch acknowledged before the fault survives the restart."""
    ran = fastwrite.counts()
    out_c = drive(tmp_path / "c", True, 7, 120, "always", Faults(), FAULTS[fault], at=60)
    now = fastwrite.counts()
    assert (now[0], now[2]) == (ran[0], ran[2])  # not one batch written, nor synced, around the seam
    ledger = list(LEDGER)
    out_py = drive(tmp_path / "py", False, 7, 120, "always", Faults(), FAULTS[fault], at=60)
    assert out_c == out_py and ledger == LEDGER
    if fault == "short-writes":
        assert out_c == [None] * 120
    else:
        assert out_c[-1] is not None and len(out_c) <= 61  # refused at (or right after) the fault
    assert files(tmp_path / "c") == files(tmp_path / "py")
    assert recovered(tmp_path / "c") == recovered(tmp_path / "py")
    # Nothing acknowledged lost: the state after the acknowledged batches, replayed without
    # faults. A refused write was undone; a batch whose fdatasync failed was written (it may
    # survive, unacknowledged: the page cache still had it).
    acked = len(out_c) - (out_c[-1] is not None)
    drive(tmp_path / "ack", False, 7, acked, "always")
    drive(tmp_path / "ack1", False, 7, acked + 1, "always")
    after = recovered(tmp_path / "c")
    assert after == recovered(tmp_path / "ack") or (
        fault == "eio-fdatasync" and after == recovered(tmp_path / "ack1"))


def opened(d: Path, durability: str) -> tuple[Wal, Engine]:
    """A WAL in ``d`` on the tests' clock, recovered, with connection 1."""
    w = Wal.open(d, durability=durability, clock=clock())
    engine, _ = w.recover(now=T0)
    engine.connect(1, T0)
    return w, engine


def test_a_real_write_error_same_outcome(tmp_path: Path) -> None:
    """A descriptor that fails for real (read-only, EBADF on pwrite): the compiled path's error
    goes to the reference's _write_failed, as the reference's own does: the same refusal."""
    outcomes = []
    for name, compiled in (("c", True), ("py", False)):
        with chain(compiled):
            w, engine = opened(tmp_path / name, "never")
            w.write(engine.apply(1, C.Put(0, 0, 60, b"first"), T0).records)
            fd = w.log._writer.active.fd
            ro = os.open(os.path.join(w.log.path, os.listdir(w.log.path)[0]), os.O_RDONLY)
            os.dup2(ro, fd)  # the segment's descriptor now refuses writes
            os.close(ro)
            try:
                w.write(engine.apply(1, C.Put(0, 0, 60, b"second"), T0).records)
            except Exception as e:
                outcomes.append((type(e).__name__, str(e).replace(str(tmp_path / name), "DIR")))
            finally:
                w.abandon()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == "LogError" and "could not be undone" in outcomes[0][1]


def test_a_real_fdatasync_error_same_outcome(tmp_path: Path) -> None:
    """A descriptor whose fdatasync fails for real (a pipe's: EINVAL): the compiled sync fails
    the log and refuses as the reference does, with the same words, and the log stays failed."""
    outcomes = []
    for name, compiled in (("c", True), ("py", False)):
        with chain(compiled):
            w, engine = opened(tmp_path / name, "always")
            w.write(engine.apply(1, C.Put(0, 0, 60, b"first"), T0).records)
            w.sync()
            w.write(engine.apply(1, C.Put(0, 0, 60, b"second"), T0).records)
            fd = w.log._writer.active.fd
            saved = os.dup(fd)
            r, wr = os.pipe()
            os.dup2(r, fd)  # fdatasync on a pipe: EINVAL
            got = []
            for _ in range(2):  # the failure, then the failed log's refusal
                try:
                    w.sync()
                    got.append(None)
                except Exception as e:
                    got.append((type(e).__name__, str(e).replace(str(tmp_path / name), "DIR")))
            os.dup2(saved, fd)
            for x in (saved, r, wr):
                os.close(x)
            outcomes.append((got, w.log.durable_offset, w.log.syncs))
            w.abandon()
    assert outcomes[0] == outcomes[1]
    (first, again), durable, syncs = outcomes[0]
    assert first is not None and first[0] == "LogError" and "the log is now failed" in first[1]
    assert again is not None and "log failed" in again[1]
    assert (durable, syncs) == (1, 1)


def test_a_replaced_method_takes_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/floor_bench.py's blocking control replaces SegmentWriter.fdatasync (a sleep): the
    compiled sync must then run it, as must a write whose seam method was replaced, and the
    compiled path resumes once the class is restored."""
    from stalkd.log.writer import SegmentWriter

    seen: list[str] = []
    real_fdatasync, real_write = SegmentWriter.fdatasync, SegmentWriter.write_many

    def fdatasync(self: SegmentWriter, fd: int) -> None:
        seen.append("fdatasync")
        real_fdatasync(self, fd)

    def write_many(self: SegmentWriter, items: Any, admit: Any) -> tuple[int, int]:
        seen.append("write_many")
        return real_write(self, items, admit)

    w, engine = opened(tmp_path, "always")
    with w:
        records = engine.apply(1, C.Put(0, 0, 60, b"x"), T0).records
        w.write(records)  # the first write zeroes a stretch ahead (the reference's)
        w.sync()
        before = fastwrite.counts()
        w.write(records)
        w.sync()
        assert seen == [] and fastwrite.counts()[0] == before[0] + 1 and fastwrite.counts()[2] == before[2] + 1
        monkeypatch.setattr(SegmentWriter, "fdatasync", fdatasync)
        monkeypatch.setattr(SegmentWriter, "write_many", write_many)
        w.write(records)
        w.sync()
        assert seen == ["write_many", "fdatasync"]
        monkeypatch.undo()
        w.write(records)
        w.sync()
        assert seen == ["write_many", "fdatasync"] and fastwrite.counts()[0] == before[0] + 2
