"""Damage in the active segment (issue 11 item 1): a torn tail is cut with one WARNING, damage is
refused naming file, byte, offset, frames following and the command; a repair cuts it, keeping the
dropped bytes. Damage is injected by writing bytes into the real segment files."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from stalkd.log import Log, LogCorruptError
from stalkd.log.frame import frame_size
from stalkd.log.recovery import recover
from stalkd.log.segment import FOOTER_SIZE, HEADER_SIZE

PAYLOAD = 40
N = 300


def payload(i: int) -> bytes:
    return b"rec-%05d-" % i + b"x" * (PAYLOAD - 10)


def make(d: Path, n: int = N) -> Path:
    """A closed log with ``n`` records whose last (active) segment is returned."""
    with Log.open(d, segment_size=8192, durability="always") as log:
        log.append_many([payload(i) for i in range(n)])
    return sorted(d.glob("seg-*.log"))[-1]


def base_of(seg: Path) -> int:
    return int(seg.name[4:24])


def frame_pos(k: int) -> int:
    """Byte position of the k-th frame of a segment."""
    return HEADER_SIZE + k * frame_size(PAYLOAD)


def test_bytes_flipped_inside_the_active_segment_are_refused_then_repaired(tmp_path: Path) -> None:
    active = make(tmp_path)
    base = base_of(active)
    frames_in_active = N - base
    assert frames_in_active > 20
    # Given 8 bytes overwritten inside the 10th frame of the active segment
    with open(active, "r+b") as f:
        f.seek(frame_pos(10) + 30)
        f.write(b"\xff" * 8)
    # Then opening refuses, naming file, byte, offset, the frames that follow, and the command
    with pytest.raises(LogCorruptError) as exc:
        Log.open(tmp_path, segment_size=8192)
    msg = str(exc.value)
    assert exc.value.path == str(active) and exc.value.position == frame_pos(10)
    assert exc.value.offset == base + 10
    assert f"{frames_in_active - 11} valid frames follow it" in msg
    assert f"stalkd log repair {tmp_path}" in msg and "repair=" not in msg
    # (nothing was changed by the refusal)
    assert not (tmp_path / "dropped").exists()
    # When repaired, the log ends at the damage and the dropped bytes are kept, 0600
    with Log.open(tmp_path, segment_size=8192, repair=True) as log:
        rep = log.repair_report
        assert rep is not None and log.next_offset == base + 10
        (q,) = rep.dropped_files
        assert os.stat(q).st_mode & 0o777 == 0o600
        kept = Path(q).read_bytes()
        assert payload(base + 11) in kept
        assert [o for o, _ in rep.salvaged] == list(range(base + 11, N))
        assert [p for _, p in rep.salvaged] == [payload(i) for i in range(base + 11, N)]
        assert log.append(b"after") == base + 10
    # Then a later open is clean and sees exactly the prefix plus the new record
    with Log.open(tmp_path, segment_size=8192) as log:
        assert log.repair_report is None
        got = [f.bytes() for f in log.read(0)]
    assert got == [payload(i) for i in range(base + 10)] + [b"after"]


def test_a_torn_tail_is_cut_with_one_warning_naming_the_bytes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    active = make(tmp_path)
    base = base_of(active)
    last = N - base - 1
    # Given the last frame half written (what a crash mid-write leaves)
    with open(active, "r+b") as f:
        f.seek(frame_pos(last) + 20)
        f.write(bytes(frame_size(PAYLOAD) - 20))
    with caplog.at_level(logging.WARNING, logger="stalkd.log"), Log.open(tmp_path, segment_size=8192) as log:
        assert log.next_offset == N - 1 and log.repair_report is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "torn tail" in warnings[0] and "20 bytes dropped" in warnings[0] and str(active) in warnings[0]
    # The torn bytes were zeroed: the next open has nothing to say
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stalkd.log"), Log.open(tmp_path, segment_size=8192) as log:
        assert log.next_offset == N - 1
    assert not caplog.records


def test_a_removed_active_segment_is_refused(tmp_path: Path) -> None:
    active = make(tmp_path)
    base = base_of(active)
    active.unlink()
    with pytest.raises(LogCorruptError, match="active segment that must follow it") as exc:
        Log.open(tmp_path, segment_size=8192)
    assert active.name in str(exc.value) and exc.value.offset == base
    with Log.open(tmp_path, segment_size=8192, repair=True) as log:
        assert log.next_offset == base and log.repair_report is not None
        assert log.append(b"on") == base
    with Log.open(tmp_path, segment_size=8192) as log:
        assert log.next_offset == base + 1


def test_an_active_segment_cut_short_is_refused(tmp_path: Path) -> None:
    active = make(tmp_path)
    base = base_of(active)
    cut = frame_pos(15) + 10  # inside the 16th frame
    os.truncate(active, cut)
    with pytest.raises(LogCorruptError, match="cut short") as exc:
        Log.open(tmp_path, segment_size=8192)
    assert exc.value.offset == base + 15 and exc.value.position == frame_pos(15)
    with Log.open(tmp_path, segment_size=8192, repair=True) as log:
        assert log.next_offset == base + 15
        log.append_many([b"y" * 100] * 100)  # room was restored: it rolls over as usual
    with Log.open(tmp_path, segment_size=8192) as log:
        assert log.next_offset == base + 115


def test_a_cut_in_the_zeros_after_the_data_loses_nothing_and_is_accepted(tmp_path: Path) -> None:
    active = make(tmp_path, n=5)
    os.truncate(active, frame_pos(5) + 4096)
    with Log.open(tmp_path, segment_size=8192) as log:
        assert log.next_offset == 5


def test_a_zeroed_frame_header_with_frames_after_it_is_damage_not_the_end(tmp_path: Path) -> None:
    active = make(tmp_path)
    with open(active, "r+b") as f:
        f.seek(frame_pos(3))
        f.write(bytes(24))
    with pytest.raises(LogCorruptError, match="valid frames follow"):
        Log.open(tmp_path, segment_size=8192)


def test_check_mode_reports_what_open_refuses_and_changes_nothing(tmp_path: Path) -> None:
    active = make(tmp_path)
    with open(active, "r+b") as f:
        f.seek(frame_pos(4) + 26)
        f.write(b"\x00\x01")
    before = {p.name: p.read_bytes() for p in tmp_path.glob("seg-*")}
    rec = recover(str(tmp_path), mode="check")
    (d,) = rec.damage
    assert d.path == str(active) and d.position == frame_pos(4) and d.following > 0
    assert {p.name: p.read_bytes() for p in tmp_path.glob("seg-*")} == before
    # an open writes nothing either, it refuses
    with pytest.raises(LogCorruptError):
        Log.open(tmp_path, segment_size=8192)
    assert {p.name: p.read_bytes() for p in tmp_path.glob("seg-*")} == before


def test_a_torn_footer_left_by_a_crash_while_rolling_over_is_not_damage(tmp_path: Path) -> None:
    # Given the previous segment's footer write torn and the next segment still empty
    with Log.open(tmp_path, segment_size=4096, durability="never") as log:
        log.append_many([b"z" * 40] * 70)
    segs = sorted(tmp_path.glob("seg-*.log"))
    last, prev = segs[-1], segs[-2]
    with open(prev, "r+b") as f:
        f.seek(prev.stat().st_size - FOOTER_SIZE)
        f.write(b"\x07" * 10)
    with open(last, "r+b") as f:
        f.seek(HEADER_SIZE)
        f.write(bytes(last.stat().st_size - HEADER_SIZE))
    with Log.open(tmp_path, segment_size=4096) as log:
        assert log.next_offset == base_of(last)
