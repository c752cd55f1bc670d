"""Snapshot format version 3 (version 2's blocks behind a header listing the log's epochs): a
frozen file image keeps reading the same, a damaged epoch list is refused, and the epochs a
promotion wrote to the WAL survive the compaction that drops that WAL."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.engine import Engine
from stalkd.engine.handover import epoch_record
from stalkd.engine.model import JobState, Op, Record
from stalkd.persist.snapshot import (
    SnapshotError,
    list_snapshots,
    load_into,
    read_header,
    read_snapshot,
)
from stalkd.persist.wal import Wal
from stalkd.protocol import commands as C

from .walutil import T0, Driver, durable_view

# Written by SnapshotWriter(start_seq=7, start_offset=50, epochs=((1, 3), (2, 40))) with one
# JOB entry (job 1, tube t, READY, body "hi"), next_id 2, end_seq 7. Never regenerate this: it
# is what v3 readers must accept forever.
FROZEN_V3 = bytes.fromhex(
    "53544b534e41500003000700000000000000320000000000000002000000010000000000000003000000000000"
    "00020000000000000028000000000000003a00000029a6ae1b0100000007000000000000000101007401000000"
    "0000000005000000000000003c00000002000000e8030000000000000000000000000000000000006869ffffff"
    "ff010000000000000002000000000000000700000000000000d474a0c8"
)


def write(tmp_path: Path, data: bytes) -> str:
    p = tmp_path / "snap-00000000000000000007.snap"
    p.write_bytes(data)
    return str(p)


def test_frozen_v3_image_reads_back(tmp_path: Path) -> None:
    path = write(tmp_path, FROZEN_V3)
    h, recs = read_snapshot(path)
    assert (h.version, h.start_seq, h.start_offset, h.count, h.next_id, h.end_seq) == (3, 7, 50, 1, 2, 7)
    assert h.epochs == ((1, 3), (2, 40))
    assert recs == [Record(Op.JOB, 7, 1000, 1, "t", 5, 0, 60, 0, b"hi", JobState.READY, 1000)]
    e = Engine()
    load_into(e, h)
    assert e.epochs == ((1, 3), (2, 40)) and sorted(e.jobs) == [1]


@pytest.mark.parametrize("cut", [30, 40, 60])
def test_truncated_epoch_list_is_not_a_snapshot(tmp_path: Path, cut: int) -> None:
    with pytest.raises(SnapshotError, match="snap-0+7.snap"):
        read_header(write(tmp_path, FROZEN_V3[:cut]))


def test_a_changed_epoch_fails_the_trailer_check(tmp_path: Path) -> None:
    damaged = bytearray(FROZEN_V3)
    damaged[34] ^= 0x01  # the first epoch number: covered by the trailer's CRC like the header
    with pytest.raises(SnapshotError, match="bad trailer"):
        read_header(write(tmp_path, bytes(damaged)))


def test_epochs_survive_the_compaction_of_the_wal_that_recorded_them(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path, durability="never", background=False, segment_size=64 * 1024)
    e, _ = wal.recover(T0)
    d = Driver(wal, e)
    d.do(1, C.Put(1, 0, 60, b"before"))
    at = wal.log.next_offset
    wal.write([epoch_record(e, 1, at, T0)])
    d.do(1, C.Put(1, 0, 60, b"x" * 2000))
    assert e.epochs == ((1, at),)
    for _ in range(3):  # whole segments of churn, then a snapshot retires the WAL below it
        for _ in range(40):
            jid = d.do(1, C.Put(1, 0, 60, b"y" * 2000))
            assert isinstance(jid, C.Reply)
            d.do(1, C.Delete(int(jid.args[0])))
        wal.snapshot(e)
    assert wal.log.segment_bounds()[0][0] > at, "the EPOCH record's segment was retired"
    (snap,) = list_snapshots(str(tmp_path / "snapshots"))
    assert read_header(snap).epochs == ((1, at),)
    expect = durable_view(e)
    wal.close()
    with Wal.open(tmp_path, durability="never", background=False, segment_size=64 * 1024) as wal2:
        e2, _ = wal2.recover(T0)
        assert e2.epochs == ((1, at),)
        assert durable_view(e2) == expect
