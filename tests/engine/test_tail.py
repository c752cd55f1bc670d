"""The fast WAL-tail replay (``tail.replay_tail``) against the record-at-a-time reference
(``replay.replay``): on random histories with fuzzy snapshots, both rebuild exactly the same
engine, containers and counters included; a damaged record is named by its log offset."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest

from stalkd.engine import Engine
from stalkd.engine.heap import IndexedHeap
from stalkd.engine.model import HEAD, PUT, U32, Op, decode
from stalkd.engine.replay import finish, replay
from stalkd.log import LogCorruptError
from stalkd.log.mark import read_mark
from stalkd.persist.idceiling import IDS_NAME
from stalkd.persist.snapshot import list_snapshots, load_into, read_header
from stalkd.persist.wal import Wal, WalError
from stalkd.protocol import commands as C

from .walutil import T0, Driver, random_step


def _heap_view(h: IndexedHeap) -> list[tuple[int, int]]:
    keys, items = h.key_list(), h.item_list()
    assert all(keys[(i - 1) >> 1] <= keys[i] for i in range(1, len(keys)))  # a valid heap
    assert all(it.hpos == i for i, it in enumerate(items))
    return sorted(zip(keys, (it.id for it in items), strict=True))


def full_view(e: Engine) -> tuple[Any, ...]:
    """Everything recovery builds: each job's fields, every container, the counters."""
    jobs = tuple(
        (j.id, j.tube.name, j.state, j.pri, j.delay, j.ttr, j.deadline_us, j.created_us, j.body,
         j.reserves, j.timeouts, j.releases, j.buries, j.kicks)  # fmt: skip
        for j in sorted(e.jobs.values(), key=lambda j: j.id)
    )
    tubes = tuple(
        (t.name, _heap_view(t.ready), _heap_view(t.delayed), tuple(t.buried), t.urgent, t.hpos >= 0)
        for t in sorted(e.tube_order, key=lambda t: t.name)
    )
    timers = sorted(k >> 64 for k in e._tube_timers.key_list())
    return jobs, tubes, timers, e.seq, e.next_id, e.body_bytes


def reference_recover(directory: Path, now: float) -> Engine:
    """Recovery as it was before the fast tail: one decode and one ``replay`` per record."""
    wal = Wal.open(directory, durability="never")
    e = Engine()
    fresh: dict[int, int] = {}
    start_seq = need = 0
    snaps = list_snapshots(str(directory / "snapshots"))
    if snaps:
        h = read_header(snaps[0])
        fresh = load_into(e, h)
        start_seq, need = h.start_seq, h.start_offset
        e.seq = max(e.seq, h.end_seq)
        e.next_id = max(e.next_id, h.next_id)
    # ids continue from the durable ceiling when the log ends below it (persist/idceiling.py)
    e.next_id = max(e.next_id, read_mark(str(directory), name=IDS_NAME) or 0)
    for frame in wal.log.read(need):
        r = decode(frame.payload)
        if r.seq <= start_seq or r.op is Op.UNKNOWN:
            continue
        stamp = fresh.get(r.job_id)
        if stamp is not None and r.seq <= stamp:
            continue
        replay(e, r)
    finish(e)
    e.tick(now)
    wal.close()
    return e


@pytest.mark.parametrize("seed", range(8))
def test_fast_tail_equals_the_reference_replay(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    wal = Wal.open(tmp_path, durability="never", segment_size=8192, chunk_jobs=4, background=False,
                   compact_min_bytes=rng.choice([0, 3000, 10**9]))  # fmt: skip
    e, _ = wal.recover(T0)
    d = Driver(wal, e)
    for i in range(rng.randint(300, 900)):
        if rng.random() < 0.03:
            d.do(1, C.PauseTube(rng.choice(["default", "a", "b"]), rng.choice([0, 5])))
        else:
            random_step(d, rng)
        if rng.random() < 0.4:
            wal.maintain(d.e, d.now)  # snapshots copied a few jobs at a time while jobs move
        if i % 97 == 0:  # a burst of puts: some tubes get many new jobs at once
            for _ in range(rng.randint(0, 40)):
                d.do(2, C.Put(rng.randint(0, 2000), rng.choice([0, 5]), 60, b"burst"))
    now = d.now
    wal.close()

    expect = reference_recover(tmp_path, now)
    wal = Wal.open(tmp_path, durability="never")
    got, info = wal.recover(now)
    wal.close()
    assert info.records_replayed > 0
    assert full_view(got) == full_view(expect)


def test_a_tail_much_larger_than_the_snapshot(tmp_path: Path) -> None:
    """Few snapshot jobs, thousands of records after: tubes' heaps are built in one go."""
    wal = Wal.open(tmp_path, durability="never", background=False)
    e, _ = wal.recover(T0)
    d = Driver(wal, e)
    for i in range(50):
        d.do(1, C.Put(i % 7, 0, 60, b"old"))
    wal.snapshot(e)
    rng = random.Random(1)
    for i in range(3000):
        d.do(1, C.Put(rng.randint(0, 3000), rng.choice([0, 0, 9]), 60, b"%d" % i))
    for jid in rng.sample(range(1, 3050), 500):
        d.do(1, C.Delete(jid))
    wal.close()
    expect = reference_recover(tmp_path, T0)
    wal = Wal.open(tmp_path, durability="never")
    got, info = wal.recover(T0)
    wal.close()
    assert info.snapshot_jobs == 50 and info.records_replayed == 3500
    assert full_view(got) == full_view(expect)


def _put_record(tube_len: int, tube: bytes, body_len: int, body: bytes) -> bytes:
    return HEAD.pack(1, int(Op.PUT), 2, 0, 2) + PUT.pack(0, 0, 60, 0, tube_len) + tube + U32.pack(body_len) + body


DAMAGED = {
    "put cut short": struct.pack("<BBQqQ", 1, int(Op.PUT), 2, 0, 2) + b"\x00\x00",
    "tube past the end": _put_record(200, b"default", 1, b"x"),
    "body longer than said": _put_record(7, b"default", 1, b"xyz"),
    "body shorter than said": _put_record(7, b"default", 9, b"xyz"),
    "release cut short": HEAD.pack(1, int(Op.RELEASE), 2, 0, 1) + b"\x01\x00",
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_record_is_named_by_its_offset(tmp_path: Path, damage: str) -> None:
    wal = Wal.open(tmp_path, durability="never")
    e, _ = wal.recover(T0)
    d = Driver(wal, e)
    d.do(1, C.Put(0, 0, 60, b"fine"))
    # A frame whose CRC is good but whose record is not (a writer bug, not a torn write): the fast
    # tail reads records where they lie in the segment, so none of these may read past its own
    wal.log.write_many([DAMAGED[damage]])
    wal.close()
    wal = Wal.open(tmp_path, durability="never")
    with pytest.raises(WalError, match=r"wal: record at offset 1: "):
        wal.recover(T0)
    wal.close()


def test_a_bad_frame_in_a_sealed_segment_of_the_tail_is_refused(tmp_path: Path) -> None:
    """The tail is read as columns of frame positions: a frame that fails its CRC inside a sealed
    segment still stops recovery with the error that names the file and the repair command."""
    wal = Wal.open(tmp_path, durability="never", segment_size=8192, background=False)
    e, _ = wal.recover(T0)
    d = Driver(wal, e)
    d.do(1, C.Put(0, 0, 60, b"before the snapshot"))
    wal.snapshot(e)
    for i in range(400):
        d.do(1, C.Put(0, 0, 60, b"tail %d" % i))
    wal.close()
    sealed = sorted((tmp_path / "wal").glob("seg-*.log"))[:-1]
    assert len(sealed) >= 3
    seg = sealed[len(sealed) // 2]
    with open(seg, "r+b") as f:
        f.seek(2000)
        byte = f.read(1)
        f.seek(2000)
        f.write(bytes([byte[0] ^ 0x01]))
    wal = Wal.open(tmp_path, durability="never")
    try:
        with pytest.raises(LogCorruptError, match="stalkd log repair") as exc:
            wal.recover(T0)
        assert exc.value.path == str(seg)
    finally:
        wal.close()
