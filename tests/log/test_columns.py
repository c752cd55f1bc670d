"""The columnar bulk read (``LogReader.read_segment_columns``) equals ``read_segment`` frame for frame:
across rolls and reopened epochs, bounds and chunk sizes, torn and damaged tails, padding frames,
archives, and a corrupt frame inside a sealed segment (same error, same place)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stalkd.log import Log, LogCorruptError, LogReader
from stalkd.log.frame import KIND_PADDING, encode_frame, frame_size
from stalkd.log.segment import HEADER_SIZE, SegmentView

Row = tuple[int, int, bytes]


def payload(i: int) -> bytes:
    return b"%d:" % i + bytes([i % 251]) * (i * 7 % 61) if i % 9 else b""  # every 9th is empty


def by_frames(reader: LogReader, path: str, start: int | None, end: int | None) -> tuple[list[Row], object]:
    rows: list[Row] = []
    try:
        for f in reader.read_segment(path, start, end):
            rows.append((f.offset, f.timestamp_us, f.bytes()))
    except LogCorruptError as exc:
        return rows, (exc.path, exc.offset, exc.position, str(exc))
    return rows, None


def by_columns(
    reader: LogReader, path: str, start: int | None, end: int | None, max_rows: int
) -> tuple[list[Row], object]:
    rows: list[Row] = []
    try:
        for cols in reader.read_segment_columns(path, start, end, max_rows):
            assert 0 < len(cols) <= max_rows
            assert len(cols.timestamps_us) == len(cols.starts) == len(cols.ends) == len(cols)
            rows.extend(zip(cols.offsets, cols.timestamps_us, map(bytes, cols.payloads()), strict=True))
    except LogCorruptError as exc:
        return rows, (exc.path, exc.offset, exc.position, str(exc))
    return rows, None


def assert_same(d: Path, bounds: list[tuple[int | None, int | None]], sizes: tuple[int, ...] = (1, 3, 8192)) -> int:
    """Both reads agree on every segment for each bound and chunk size; returns rows compared."""
    total = 0
    with LogReader(d) as reader:
        for seg in reader.segments():
            for start, end in bounds:
                want = by_frames(reader, seg.path, start, end)
                for n in sizes:
                    assert by_columns(reader, seg.path, start, end, n) == want, (seg.path, start, end, n)
                total += len(want[0])
    return total


def rolled_log(d: Path, n: int = 400) -> None:
    # Small segments roll often; reopening raises the epoch between batches.
    for lo in range(0, n, 100):
        with Log.open(d, segment_size=2048, durability="never") as log:
            log.append_many([payload(i) for i in range(lo, min(n, lo + 100))])


def test_equal_across_rolls_epochs_bounds_and_chunk_sizes(tmp_path: Path) -> None:
    rolled_log(tmp_path)
    bounds: list[tuple[int | None, int | None]] = [(None, None), (0, None), (5, 17), (150, 151), (399, 1000), (30, 30)]
    assert assert_same(tmp_path, bounds) > 400  # every frame at least once
    with LogReader(tmp_path) as reader:
        got = [o for s in reader.segments() for c in reader.read_segment_columns(s.path) for o in c.offsets]
    assert got == list(range(400))


@settings(max_examples=40, deadline=None)
@given(start=st.integers(0, 420), length=st.integers(0, 80), max_rows=st.integers(1, 50))
def test_any_window_equals(tmp_path_factory: pytest.TempPathFactory, start: int, length: int, max_rows: int) -> None:
    d = tmp_path_factory.getbasetemp() / "window-log"
    if not d.exists():
        rolled_log(d)
    with LogReader(d) as reader:
        for seg in reader.segments():
            want = by_frames(reader, seg.path, start, start + length)
            assert by_columns(reader, seg.path, start, start + length, max_rows) == want


def active_segment(d: Path) -> Path:
    return sorted(d.glob("seg-*.log"))[-1]


@pytest.mark.parametrize("damage", ["zero-from", "flip-bit", "truncate-file"])
def test_torn_tail_at_every_byte_of_the_last_frame(tmp_path: Path, damage: str) -> None:
    with Log.open(tmp_path, segment_size=4096, durability="never") as log:
        log.append_many([payload(i) for i in range(1, 12)])
    seg = active_segment(tmp_path)
    pristine = seg.read_bytes()
    start = HEADER_SIZE + sum(frame_size(len(payload(i))) for i in range(1, 11))
    end = start + frame_size(len(payload(11)))
    for k in range(start, end):
        data = bytearray(pristine)
        if damage == "zero-from":
            data[k:end] = bytes(end - k)
        elif damage == "flip-bit":
            data[k] ^= 1 << (k % 8)
        else:
            del data[k:]
        seg.write_bytes(bytes(data))
        with LogReader(tmp_path) as reader:
            want = by_frames(reader, str(seg), None, None)
            if damage != "zero-from" or k < start + 24 + len(payload(11)):  # zeroed padding is no damage
                assert len(want[0]) == 10 and want[1] is None, k
            for n in (1, 4, 100):
                assert by_columns(reader, str(seg), None, None, n) == want, (damage, k, n)


@settings(max_examples=40, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 6000), st.integers(0, 7)), min_size=1, max_size=4))
def test_random_damage_to_the_active_segment(tmp_path_factory: pytest.TempPathFactory, flips: list[tuple[int, int]]) -> None:
    d = tmp_path_factory.mktemp("flips")
    with Log.open(d, segment_size=16384, durability="never") as log:
        log.append_many([payload(i) for i in range(80)])
    seg = active_segment(d)
    data = bytearray(seg.read_bytes())
    for pos, bit in flips:
        data[HEADER_SIZE + pos % (len(data) - HEADER_SIZE)] ^= 1 << bit
    seg.write_bytes(bytes(data))
    try:
        SegmentView(str(seg)).close()
    except LogCorruptError:
        return  # a flip turned the zero footer room into something else: not a readable segment
    assert_same(d, [(None, None), (10, 40)], (1, 7, 8192))


def test_padding_and_unknown_kinds_are_skipped_alike(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never") as log:
        log.append_many([b"a", b"bb"])
    seg = active_segment(tmp_path)
    view = SegmentView(str(seg))
    epoch = view.epoch
    view.close()
    at = HEADER_SIZE + frame_size(1) + frame_size(2)
    # Non-data frames carrying the delta a data frame would have there: only the kind tells.
    extra = encode_frame(b"filler", 2, 5, epoch, KIND_PADDING) + encode_frame(b"?", 2, 6, epoch, 5)
    extra += encode_frame(b"ccc", 2, 7, epoch)  # delta 2: the third data frame
    with open(seg, "r+b") as f:
        f.seek(at)
        f.write(extra)
    with LogReader(tmp_path) as reader:
        rows, err = by_frames(reader, str(seg), None, None)
    assert [r[2] for r in rows] == [b"a", b"bb", b"ccc"] and err is None
    assert_same(tmp_path, [(None, None), (2, None), (0, 2)])


def test_corrupt_frame_inside_a_sealed_segment_raises_the_same_error(tmp_path: Path) -> None:
    with Log.open(tmp_path, segment_size=1024, durability="never") as log:
        log.append_many([b"p%03d" % i + bytes(20) for i in range(200)])
    victim = sorted(tmp_path.glob("seg-*.log"))[2]
    with open(victim, "r+b") as f:
        f.seek(HEADER_SIZE + 2 * frame_size(24) + 26)
        f.write(b"\xff")
    with LogReader(tmp_path) as reader:
        want = by_frames(reader, str(victim), None, None)
        assert len(want[0]) == 2 and want[1] is not None
        for n in (1, 2, 3, 100):
            assert by_columns(reader, str(victim), None, None, n) == want
        # A window that ends before the damage reads cleanly in both
        base = want[0][0][0]
        assert by_columns(reader, str(victim), base, base + 2, 1) == by_frames(reader, str(victim), base, base + 2)
        assert by_frames(reader, str(victim), base, base + 2)[1] is None


def test_archived_segments_and_bad_arguments(tmp_path: Path) -> None:
    with Log.open(tmp_path, segment_size=2048, durability="never", archive=True) as log:
        log.append_many([payload(i) for i in range(300)])
        moved = log.retain(floor=200)
    assert moved and all(os.path.dirname(p).endswith("archive") for p in moved)
    assert assert_same(tmp_path, [(None, None), (100, 250)]) >= 300
    with LogReader(tmp_path) as reader, pytest.raises(ValueError, match="max_rows"):
        next(reader.read_segment_columns(moved[0], None, None, 0))


@pytest.mark.parametrize("bad", ["wrong-delta", "epoch-above-header", "epoch-below-previous"])
def test_frames_the_scan_rejects_end_both_reads_there(tmp_path: Path, bad: str) -> None:
    with Log.open(tmp_path, durability="never") as log:
        log.append_many([b"a", b"bb"])
    seg = active_segment(tmp_path)
    view = SegmentView(str(seg))
    epoch = view.epoch
    view.close()
    assert epoch >= 1
    delta, frame_epoch = {"wrong-delta": (7, epoch), "epoch-above-header": (2, epoch + 1),
                          "epoch-below-previous": (2, epoch - 1)}[bad]  # fmt: skip
    tail = encode_frame(b"stale", delta, 5, frame_epoch) + encode_frame(b"next", 3, 6, epoch)
    with open(seg, "r+b") as f:
        f.seek(HEADER_SIZE + frame_size(1) + frame_size(2))
        f.write(tail)
    with LogReader(tmp_path) as reader:
        assert [r[2] for r in by_frames(reader, str(seg), None, None)[0]] == [b"a", b"bb"]
    assert_same(tmp_path, [(None, None), (1, None), (2, None)])
