"""``Log.frames_after``: the frames that follow a read position, as the writer laid them out
(what a primary streams to a standby), across writes, io modes, byte limits and segment rolls."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.log import Log
from stalkd.log.frame import Frame, ScanState, frame_size, scan
from stalkd.log.reader import ReadPos


def frames_in(view: memoryview, base: int, first: int) -> list[tuple[int, bytes]]:
    """The data frames of ``view`` (checked as a reader checks them), as (offset, payload)."""
    st = ScanState(0, first)
    frames: list[Frame] = list(scan(view, base, 0xFFFF, st, len(view)))
    assert (st.status, st.pos) == ("end", len(view)), "the view holds whole, valid frames only"
    return [(f.offset, f.bytes()) for f in frames]


def follow(log: Log, at: ReadPos, max_bytes: int) -> list[tuple[int, bytes]]:
    """Everything past ``at`` through ``frames_after``, as a sender takes it (``at`` moves)."""
    out: list[tuple[int, bytes]] = []
    while at.offset < log.next_offset:
        got = log.frames_after(at, max_bytes)
        assert got is not None
        base, pos, view, end = got
        assert len(view) <= max(max_bytes, frame_size(300)), "cut at the limit (one frame may pass it)"
        out += frames_in(view, base, at.offset)
        assert out[-1][0] == end - 1
        at.base, at.pos, at.offset = base, pos + len(view), end
        view.release()
    return out


@pytest.mark.parametrize("io", ["pwrite", "mmap"])
@pytest.mark.parametrize("max_bytes", [1, 200, 1 << 20])
def test_what_follows_a_position_is_what_was_written(tmp_path: Path, io: str, max_bytes: int) -> None:
    with Log.open(tmp_path, durability="never", segment_size=4096, io=io) as log:  # type: ignore[arg-type]
        log.append_many([b"a" * 10, b"b" * 20])
        at = ReadPos(-1, 0, 0)
        assert [f.offset for f in log.read(0, resume=at)] == [0, 1]
        got = log.frames_after(at, max_bytes)
        assert got is not None and len(got[2]) == 0 and got[3] == 2  # nothing written since
        sent: list[tuple[int, bytes]] = []
        for i in range(2, 200):  # the 4 KiB segments roll many times: sealed ones are read on
            log.append_many([b"%d" % i * (i % 7), b"x" * (i % 300)])
            if i % 3 == 0:  # sometimes behind by several group commits
                sent += follow(log, at, max_bytes)
        sent += follow(log, at, max_bytes)
        assert len(log.segment_bounds()) > 3
        assert sent == [(f.offset, f.bytes()) for f in log.read(2)]


def test_the_end_of_a_removed_segment_continues_in_the_next(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never", segment_size=4096) as log:
        log.append_many([b"z" * 100] * 60)
        bounds = log.segment_bounds()
        first_end = bounds[1][0]
        at = ReadPos(-1, 0, 0)
        assert len(list(log.read(0, first_end, resume=at))) == first_end
        log.retain(first_end)  # the segment ``at`` ended is removed
        assert log.segment_bounds()[0][0] == first_end
        assert follow(log, at, 1 << 20) == [(f.offset, f.bytes()) for f in log.read(first_end)]


def test_a_position_in_no_live_segment_gets_none(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never", segment_size=4096) as log:
        log.append_many([b"y" * 100] * 60)  # past the first segment
        base = log.segment_bounds()[-1][0]
        assert base > 0
        assert log.frames_after(ReadPos(-1, 5, 0), 1 << 20) is None  # not read yet, not a segment's start
        got = log.frames_after(ReadPos(-1, 0, 0), 1 << 20)  # a segment's start needs no read
        assert got is not None and frames_in(got[2], 0, 0)[0] == (0, b"y" * 100)
        assert log.frames_after(ReadPos(3, 3, 64), 1 << 20) is None  # no segment is based there
        assert log.frames_after(ReadPos(base, log.next_offset + 1, 64), 1 << 20) is None  # beyond the end
