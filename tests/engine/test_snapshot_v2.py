"""Snapshot format version 2 (columnar blocks): a frozen file image keeps reading the same, damage
is named, heap order survives a restart, and a version-1 snapshot still recovers."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from stalkd.engine import Engine
from stalkd.engine.heap import IndexedHeap
from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.replay import durable_record, finish
from stalkd.persist.snap_v2 import encode_block
from stalkd.persist.snapfile import block_bytes, head_bytes, trailer_bytes
from stalkd.persist.snapshot import (
    SNAP_VERSION,
    SnapshotError,
    SnapshotWriter,
    iter_jobs,
    list_snapshots,
    load_into,
    read_header,
    read_snapshot,
)
from stalkd.protocol import commands as C

from .harness import Harness
from .walutil import T0, Driver, durable_view

# Written by SnapshotWriter(start_seq=7, start_offset=3) with add(EXPECTED[:2]), add(EXPECTED[2:]):
# three blocks (tube t READY x2 at seq 7; tube t DELAYED at seq 9; tube u BURIED at seq 9),
# next_id 8, end_seq 9. Never regenerate this: it is what v2 readers must accept forever.
FROZEN_V2 = bytes.fromhex(
    "53544b534e4150000200070000000000000003000000000000007a00000064cb84db0200000007000000000000"
    "00010100740100000000000000020000000000000005000000d007000000000000000000003c00000001000000"
    "0200000000000000e803000000000000dc05000000000000000000000000000000000000000000000100000000"
    "0000000100000000000000020000000000000000000000686938000000b0e44927010000000900000000000000"
    "040100740400000000000000090000001e0000000100000000000000d007000000000000404b4c000000000000"
    "00000051000000103966f501000000090000000000000003010075060000000000000002000000000000000a00"
    "000001000000b80b00000000000008000000000000000100000000000000000000000000000000000000010000"
    "000000000062ffffffff040000000000000008000000000000000900000000000000235ac012"
)

EXPECTED = [
    Record(Op.JOB, 7, 1000, 1, "t", 5, 0, 60, 0, b"hi", JobState.READY, 1000, 1, 0, 2, 0, 0),
    Record(Op.JOB, 7, 1500, 2, "t", 2000, 0, 1, 0, b"", JobState.READY, 1500),
    Record(Op.JOB, 9, 2000, 4, "t", 9, 30, 1, 5_000_000, b"", JobState.DELAYED, 2000),
    Record(Op.JOB, 9, 3000, 6, "u", 2, 0, 10, 8, b"b", JobState.BURIED, 3000, 0, 0, 0, 1, 0),
]


def write(tmp_path: Path, data: bytes) -> str:
    p = tmp_path / "snap-00000000000000000007.snap"
    p.write_bytes(data)
    return str(p)


def test_frozen_v2_image_reads_back(tmp_path: Path) -> None:
    path = write(tmp_path, FROZEN_V2)
    h, recs = read_snapshot(path)
    assert (h.version, h.start_seq, h.start_offset, h.count, h.next_id, h.end_seq) == (2, 7, 3, 4, 8, 9)
    assert recs == EXPECTED
    fast = list(iter_jobs(path, h))
    assert [(t[0], t[1], t[2], t[8], t[7]) for t in fast] == [
        (r.seq, r.job_id, r.tube, r.state, r.body) for r in EXPECTED
    ]
    partial = iter_jobs(path, h)
    assert next(partial)[1] == 1
    partial.close()  # stopping early unmaps the file cleanly (no view of it left alive)


def test_frozen_v2_image_loads_into_an_engine(tmp_path: Path) -> None:
    h = read_header(write(tmp_path, FROZEN_V2))
    e = Engine()
    fresh = load_into(e, h)
    finish(e)
    assert fresh == {4: 9, 6: 9}  # copied after the snapshot began (seq 9 > start_seq 7)
    assert [durable_record(e.jobs[i], 0) for i in sorted(e.jobs)] == [
        durable_record(e.jobs[r.job_id], 0) for r in EXPECTED
    ]
    t, u = e.tubes["t"], e.tubes["u"]
    assert [j.id for j in t.ready.sorted_items()] == [1, 2] and t.urgent == 1
    assert t.delayed.peek() is e.jobs[4] and e.jobs[4].deadline_us == 5_000_000
    assert list(u.buried) == [6] and e.jobs[6].deadline_us == 8
    assert (e.jobs[1].reserves, e.jobs[1].releases, e.jobs[6].buries) == (1, 2, 1)
    assert e.body_bytes == 3 and e.next_id == 7


def test_flipped_byte_in_a_block_names_file_and_offset(tmp_path: Path) -> None:
    damaged = bytearray(FROZEN_V2)
    damaged[60] ^= 0xFF
    path = write(tmp_path, bytes(damaged))
    with pytest.raises(SnapshotError, match=r"snap-0+7\.snap: offset 26: block of 2 jobs fails its CRC"):
        read_snapshot(path)
    with pytest.raises(SnapshotError, match="offset 26"):
        load_into(Engine(), read_header(path))


@pytest.mark.parametrize("cut", [0, 10, 26, 100, len(FROZEN_V2) - 1])
def test_truncated_file_is_not_a_snapshot(tmp_path: Path, cut: int) -> None:
    path = write(tmp_path, FROZEN_V2[:cut])
    with pytest.raises(SnapshotError, match="snap-0+7.snap"):
        read_snapshot(path)


def _one_block_file(tmp_path: Path, block: bytes, count: int) -> str:
    head = head_bytes(2, 7, 3)
    return write(tmp_path, head + block_bytes(block, count) + trailer_bytes(head, count, 9, 7))


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda b: b + b"x", "body lengths of 2 jobs do not match the block"),
        (lambda b: b[:-1], "body lengths of 2 jobs do not match the block"),
        (lambda b: b[:8] + b"\x02" + b[9:], "block of 2 jobs has unknown state 2"),
        (lambda b: b[:30], "block too short for 2 jobs"),
    ],
)
def test_inconsistent_block_with_a_good_crc_is_named(tmp_path: Path, tamper: object, message: str) -> None:
    block = encode_block(7, b"t", 1, [1, 2], [0, 0], [0, 0], [60, 60], [5, 6], [0, 0], [b"ab", b"c"], [])
    path = _one_block_file(tmp_path, tamper(block), 2)  # type: ignore[operator]
    with pytest.raises(SnapshotError, match=rf"snap-0+7\.snap: offset 26: {message}"):
        read_snapshot(path)
    with pytest.raises(SnapshotError, match=message):
        load_into(Engine(), read_header(path))


def test_counter_row_outside_its_block_is_named(tmp_path: Path) -> None:
    block = encode_block(7, b"t", 1, [1], [0], [0], [60], [5], [0], [b"a"], [(3, 1, 0, 0, 0, 0)])
    with pytest.raises(SnapshotError, match="counter row names a job outside the block"):
        read_snapshot(_one_block_file(tmp_path, block, 1))


def test_duplicate_job_ids_are_refused(tmp_path: Path) -> None:
    block = encode_block(7, b"t", 1, [1, 1], [0, 0], [0, 0], [60, 60], [5, 6], [0, 0], [b"a", b"b"], [])
    with pytest.raises(SnapshotError, match="2 entries but 1 distinct job ids"):
        load_into(Engine(), read_header(_one_block_file(tmp_path, block, 2)))


def test_job_packing_matches_the_record_path(tmp_path: Path) -> None:
    """add_jobs (columns gathered from live jobs) writes exactly what add(durable_record(...))
    writes, for every job state, counters included."""
    h = Harness()
    h.do(1, C.Put(3, 0, 60, b"ready"))
    h.do(1, C.Put(4, 0, 60, b"reserved"))
    h.do(1, C.Put(5, 30, 60, b"delayed"))
    h.do(1, C.Put(6, 0, 60, b""))
    h.do(1, C.ReserveJob(2))
    h.do(1, C.ReserveJob(4))
    h.do(1, C.Bury(4, 9))
    h.do(1, C.Reserve())
    h.do(1, C.Release(1, 7, 0))
    jobs = [h.e.jobs[i] for i in sorted(h.e.jobs)]
    slow = SnapshotWriter(str(tmp_path / "slow"), 1, 0)
    slow.add([durable_record(j, 42) for j in jobs])
    fast = SnapshotWriter(str(tmp_path / "fast"), 1, 0)
    fast.add_jobs(jobs, 42)
    a = Path(slow.finish(9, 42)).read_bytes()
    b = Path(fast.finish(9, 42)).read_bytes()
    assert a == b
    got = {r.job_id: r for r in read_snapshot(str(tmp_path / "fast" / "snap-00000000000000000001.snap"))[1]}
    assert got == {j.id: durable_record(j, 42) for j in jobs}


def _is_heap(h: IndexedHeap) -> bool:
    keys = h.key_list()
    return all(keys[(i - 1) >> 1] <= keys[i] for i in range(1, len(keys))) and all(
        it.hpos == i  # type: ignore[attr-defined]
        for i, it in enumerate(h.item_list())
    )


def _busy_engine(d: Driver, rng: random.Random, n: int) -> None:
    for i in range(n):
        d.do(1, C.Use(rng.choice(["a", "b"])))
        d.do(1, C.Put(rng.randint(0, 3000), rng.choice([0, 0, 0, 50, 100]), 60, b"%d" % i))
    for _ in range(n // 10):
        d.do(2, C.ReserveJob(rng.randint(1, n)))
    for jid in list(d.e.conns[2].reserved)[: n // 20]:
        d.do(2, C.Bury(jid.id, 7))


def test_quiet_snapshot_restores_heaps_exactly_as_they_were(tmp_path: Path) -> None:
    """A snapshot taken while nothing moves is written in heap-array order, so recovery gets
    each tube's ready and delay heap back slot for slot (no reordering was needed)."""
    from stalkd.persist.wal import Wal

    wal = Wal.open(tmp_path, durability="never", chunk_jobs=7, background=False)
    e, _ = wal.recover(T0)
    d = Driver(wal, e)
    _busy_engine(d, random.Random(3), 400)
    d.disconnect(2)  # its reserved jobs go back to ready: they were never in heap order
    wal.snapshot(e)
    want = {name: ([j.id for j in t.ready], [j.id for j in t.delayed]) for name, t in e.tubes.items()}
    expect = durable_view(e)
    wal.close()
    wal = Wal.open(tmp_path, durability="never")
    e2, info = wal.recover(T0)
    assert info.records_replayed == 0 and info.snapshot_jobs == len(e2.jobs) > 300
    got = {name: ([j.id for j in t.ready], [j.id for j in t.delayed]) for name, t in e2.tubes.items()}
    assert got == want
    assert durable_view(e2) == expect
    wal.close()


@pytest.mark.parametrize("seed", range(3))
def test_snapshot_taken_while_jobs_move_recovers_valid_heaps(tmp_path: Path, seed: int) -> None:
    """Jobs reserved, released, buried, kicked and deleted between the chunks of a snapshot:
    the file is no longer in heap order, and recovery still builds valid heaps and the
    acknowledged state."""
    from stalkd.persist.wal import Wal

    rng = random.Random(seed)
    wal = Wal.open(tmp_path, durability="never", chunk_jobs=5, background=False)
    e, _ = wal.recover(T0)
    d = Driver(wal, e)
    _busy_engine(d, rng, 300)
    assert wal.maintain(e, d.now, force=True)
    while wal.maintain(e, d.now):
        for _ in range(3):
            jid = rng.randint(1, 300)
            cmd = rng.choice([C.ReserveJob(jid), C.Delete(jid), C.Release(jid, rng.randint(0, 50), 0),
                              C.Bury(jid, 1), C.KickJob(jid), C.Reserve()])  # fmt: skip
            d.do(3, cmd)
    expect = durable_view(e)
    wal.close()
    wal = Wal.open(tmp_path, durability="never")
    e2, info = wal.recover(T0)
    assert info.snapshot is not None
    assert durable_view(e2) == expect
    for t in e2.tubes.values():
        assert _is_heap(t.ready) and _is_heap(t.delayed)  # type: ignore[arg-type]
        assert t.urgent == sum(1 for j in t.ready if j.pri < 1024)
    wal.close()


def test_a_version_1_snapshot_still_recovers(tmp_path: Path) -> None:
    """A data directory last written by a v1 build: its snapshot (rewritten here in v1 from the
    same entries) recovers the same state, and the next snapshot is written in v2."""
    from stalkd.persist.wal import Wal

    wal = Wal.open(tmp_path, durability="never", background=False)
    e, _ = wal.recover(T0)
    d = Driver(wal, e)
    _busy_engine(d, random.Random(5), 200)
    wal.snapshot(e)
    d.do(1, C.Put(1, 0, 60, b"after the snapshot"))
    expect = durable_view(e)
    wal.close()
    (path,) = list_snapshots(str(tmp_path / "snapshots"))
    h, recs = read_snapshot(path)
    os.unlink(path)
    w = SnapshotWriter(str(tmp_path / "snapshots"), h.start_seq, h.start_offset, version=1)
    w.add(recs)
    assert read_header(w.finish(h.next_id, h.end_seq)).version == 1

    wal = Wal.open(tmp_path, durability="never", background=False)
    e2, info = wal.recover(T0)
    assert info.snapshot == path and info.records_replayed == 1
    assert durable_view(e2) == expect
    wal.snapshot(e2)
    (newer,) = list_snapshots(str(tmp_path / "snapshots"))
    assert read_header(newer).version == SNAP_VERSION
    wal.close()
