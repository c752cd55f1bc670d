"""``Log.tail_frames``: the frames written after a read position, as the writer laid them out
(what a primary streams to a standby at its log's end), across writes, io modes and segment rolls."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.log import Log
from stalkd.log.frame import Frame, ScanState, scan
from stalkd.log.reader import ReadPos


def frames_in(tail: memoryview, base: int, first: int) -> list[tuple[int, bytes]]:
    """The data frames of ``tail`` (checked as a reader checks them), as (offset, payload)."""
    st = ScanState(0, first)
    frames: list[Frame] = list(scan(tail, base, 0xFFFF, st, len(tail)))
    got = [(f.offset, f.bytes()) for f in frames]
    assert (st.status, st.pos) == ("end", len(tail)), "the tail holds whole, valid frames only"
    return got


@pytest.mark.parametrize("io", ["pwrite", "mmap"])
def test_the_tail_is_what_was_written_since_the_position(tmp_path: Path, io: str) -> None:
    with Log.open(tmp_path, durability="never", segment_size=4096, io=io) as log:  # type: ignore[arg-type]
        log.append_many([b"a" * 10, b"b" * 20])
        at = ReadPos(-1, 0, 0)
        assert [f.offset for f in log.read(0, resume=at)] == [0, 1]
        tail = log.tail_frames(at)
        assert tail is not None and len(tail) == 0  # nothing written since
        sent: list[tuple[int, bytes]] = []
        rolled = False
        for i in range(2, 200):  # enough to roll the 4 KiB segment several times
            log.append_many([b"%d" % i * (i % 7), b"x"])
            tail = log.tail_frames(at)
            if tail is None:  # the writer moved to a new segment: the caller reads frame by frame
                rolled = True
                got = [(f.offset, f.bytes()) for f in log.read(at.offset, resume=at)]
            else:
                got = frames_in(tail, at.base, at.offset)
                at.pos += len(tail)
                at.offset = log.next_offset
                tail.release()
            sent += got
        assert rolled
        assert sent == [(f.offset, f.bytes()) for f in log.read(2)]


def test_a_position_outside_the_active_segment_gets_none(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never", segment_size=4096) as log:
        log.append_many([b"y" * 100] * 60)  # past the first segment
        base = log.segment_bounds()[-1][0]
        assert base > 0
        assert log.tail_frames(ReadPos(0, 0, 64)) is None  # a sealed segment
        assert log.tail_frames(ReadPos(-1, 0, 0)) is None  # no read yet
        assert log.tail_frames(ReadPos(base, log.next_offset + 1, 64)) is None  # beyond the end
