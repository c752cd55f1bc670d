"""Snapshot format version 1: a frozen file image must keep reading the same, and damage is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.replay import durable_record
from stalkd.persist.snapshot import (
    SnapshotError,
    SnapshotWriter,
    iter_jobs,
    read_header,
    read_snapshot,
)
from stalkd.protocol.commands import Bury, Put, Release, Reserve, ReserveJob

from .harness import Harness

# Written by SnapshotWriter(start_seq=7, start_offset=3): two blocks (2 jobs, then 1 job),
# next_id 8, end_seq 9. Never regenerate this: it is what v1 readers must accept forever.
FROZEN_V1 = bytes.fromhex(
    "53544b534e415000010007000000000000000300000000000000ae0000003d2609480200000054000000010a07"
    "00000000000000e80300000000000001000000000000000105000000000000003c000000e80300000000000000"
    "00000000000000010000000000000002000000000000000000000001007402000000686952000000010a090000"
    "0000000000d007000000000000040000000000000004090000001e00000001000000d007000000000000404b4c"
    "0000000000000000000000000000000000000000000000000001007400000000570000000fc5ee280100000053"
    "000000010a0900000000000000b80b00000000000006000000000000000302000000000000000a000000b80b00"
    "0000000000080000000000000000000000000000000000000001000000000000000100750100000062ffffffff"
    "030000000000000008000000000000000900000000000000a82e2bfb"
)

EXPECTED = [
    Record(Op.JOB, 7, 1000, 1, "t", 5, 0, 60, 0, b"hi", JobState.READY, 1000, 1, 0, 2, 0, 0),
    Record(Op.JOB, 9, 2000, 4, "t", 9, 30, 1, 5_000_000, b"", JobState.DELAYED, 2000),
    Record(Op.JOB, 9, 3000, 6, "u", 2, 0, 10, 8, b"b", JobState.BURIED, 3000, 0, 0, 0, 1, 0),
]


def write(tmp_path: Path, data: bytes) -> str:
    p = tmp_path / "snap-00000000000000000007.snap"
    p.write_bytes(data)
    return str(p)


def test_frozen_v1_image_reads_back(tmp_path: Path) -> None:
    path = write(tmp_path, FROZEN_V1)
    h, recs = read_snapshot(path)
    assert (h.start_seq, h.start_offset, h.count, h.next_id, h.end_seq) == (7, 3, 3, 8, 9)
    assert recs == EXPECTED
    fast = list(iter_jobs(path, h))
    assert [(t[1], t[2], t[8], t[7]) for t in fast] == [(r.job_id, r.tube, r.state, r.body) for r in EXPECTED]


def test_flipped_byte_in_a_block_names_file_and_offset(tmp_path: Path) -> None:
    damaged = bytearray(FROZEN_V1)
    damaged[60] ^= 0xFF
    path = write(tmp_path, bytes(damaged))
    h = read_header(path)
    with pytest.raises(SnapshotError, match=r"snap-0+7\.snap: offset 26: block of 2 jobs fails its CRC"):
        list(iter_jobs(path, h))


@pytest.mark.parametrize("cut", [0, 10, 26, 100, len(FROZEN_V1) - 1])
def test_truncated_file_is_not_a_snapshot(tmp_path: Path, cut: int) -> None:
    path = write(tmp_path, FROZEN_V1[:cut])
    with pytest.raises(SnapshotError, match="snap-0+7.snap"):
        read_snapshot(path)


def test_unknown_version_is_refused_clearly(tmp_path: Path) -> None:
    data = bytearray(FROZEN_V1)
    data[8] = 99
    with pytest.raises(SnapshotError, match="version 99 is unknown"):
        read_header(write(tmp_path, bytes(data)))


def test_fast_job_packing_matches_the_record_encoding(tmp_path: Path) -> None:
    """SnapshotWriter.add_jobs (packs straight from live jobs) writes exactly the entries that
    add(durable_record(...)) writes, for every job state."""
    h = Harness()
    h.do(1, Put(3, 0, 60, b"ready"))
    h.do(1, Put(4, 0, 60, b"reserved"))
    h.do(1, Put(5, 30, 60, b"delayed"))
    h.do(1, Put(6, 0, 60, b""))
    h.do(1, ReserveJob(2))
    h.do(1, ReserveJob(4))
    h.do(1, Bury(4, 9))
    h.do(1, Reserve())
    h.do(1, Release(1, 7, 0))

    jobs = [h.e.jobs[i] for i in sorted(h.e.jobs)]
    slow = SnapshotWriter(str(tmp_path / "slow"), 1, 0, version=1)
    slow.add([durable_record(j, 42) for j in jobs])
    fast = SnapshotWriter(str(tmp_path / "fast"), 1, 0, version=1)
    fast.add_jobs(jobs, 42)
    a = Path(slow.finish(9, 42)).read_bytes()
    b = Path(fast.finish(9, 42)).read_bytes()
    assert a == b
