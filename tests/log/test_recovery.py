"""Recovery: torn tails at every byte, bit flips, zero fill, stale frames, sealed-segment damage,
repair; faults injected while recovery or retention changes files."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from stalkd.log import Log, LogCorruptError, LogReader
from stalkd.log.frame import frame_size
from stalkd.log.fs import REAL, CrashPoint, Faults
from stalkd.log.repairs import DROPPED_DIR, cut
from stalkd.log.segment import FOOTER_SIZE, HEADER_SIZE

PAYLOADS = [b"record-%02d" % i + b"x" * (i * 3) for i in range(12)]


def only_segment(d: Path) -> Path:
    (seg,) = sorted(d.glob("seg-*.log"))
    return seg


def make_log(d: Path, payloads: list[bytes] = PAYLOADS, segment_size: int = 64 * 2**20) -> tuple[int, int]:
    """A closed single-segment log; returns the byte range of its last frame."""
    with Log.open(d, segment_size=segment_size, durability="always") as log:
        log.append_many(payloads)
    start = HEADER_SIZE + sum(frame_size(len(p)) for p in payloads[:-1])
    return start, start + frame_size(len(payloads[-1]))


def payloads_of(d: Path, segment_size: int = 64 * 2**20) -> list[bytes]:
    with Log.open(d, segment_size=segment_size, durability="never") as log:
        return [f.bytes() for f in log.read(0)]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["zero-from", "flip-bit", "truncate-file"])
def test_torn_last_frame_at_every_byte(tmp_path: Path, damage: str) -> None:
    # 3 MiB segments, not 64: every case scans the empty rest of the segment, and 3 MiB is still
    # several of recovery's 1 MiB zero-scan chunks, so that loop runs as it does at full size
    seg_size = 3 * 2**20
    start, end = make_log(tmp_path / "layout", segment_size=seg_size)
    assert (end - start) % 8 == 0 and len(PAYLOADS[-1]) % 8 != 0  # padding bytes are covered too
    data_end = start + 24 + len(PAYLOADS[-1])
    for k in range(start, data_end if damage == "zero-from" else end):  # zeroing zero padding is no damage
        d = tmp_path / f"case-{k}"
        # A fresh log per case rather than a copy: a copy writes out the whole preallocated
        # segment, creating one only reserves it
        assert make_log(d, segment_size=seg_size) == (start, end)
        seg = only_segment(d)
        with open(seg, "r+b") as f:
            if damage == "zero-from":
                f.seek(k)
                f.write(bytes(end - k))
            elif damage == "flip-bit":
                f.seek(k)
                b = f.read(1)[0]
                f.seek(k)
                f.write(bytes([b ^ (1 << (k % 8))]))
            else:
                f.truncate(k)
        if damage == "truncate-file":
            # A preallocated file is never shortened by a crash: refused, then cut by a repair
            with pytest.raises(LogCorruptError, match="cut short") as exc:
                Log.open(d, segment_size=seg_size, durability="never")
            assert "stalkd log repair" in str(exc.value)
            Log.open(d, segment_size=seg_size, durability="never", repair=True).close()
        # Then recovery ends exactly at the previous frame, and the log keeps working
        with Log.open(d, segment_size=seg_size, durability="never") as log:
            assert log.next_offset == len(PAYLOADS) - 1, f"{damage} at byte {k}"
            assert [f.bytes() for f in log.read(0)] == PAYLOADS[:-1]
            assert log.append(b"after") == len(PAYLOADS) - 1
        assert payloads_of(d, seg_size) == PAYLOADS[:-1] + [b"after"]
        shutil.rmtree(d)


def test_stale_frames_behind_a_torn_one_never_come_back(tmp_path: Path) -> None:
    # Given A B C where B is damaged, recovery ends after A
    payloads = [b"A" * 16, b"B" * 16, b"C" * 16]
    make_log(tmp_path, payloads)
    with open(only_segment(tmp_path), "r+b") as f:
        f.seek(HEADER_SIZE + frame_size(16) + 30)
        f.write(b"\xee")
    # (valid frames after a bad one are damage, not a torn tail: refused, cut by a repair)
    with pytest.raises(LogCorruptError, match="1 valid frame follows"):
        Log.open(tmp_path, durability="always")
    Log.open(tmp_path, durability="always", repair=True).close()
    # When a new frame D of B's size is written where B was
    with Log.open(tmp_path, durability="always") as log:
        assert log.next_offset == 1
        log.append(b"D" * 16)
    # Then C (intact, with the delta that now fits) is not resurrected behind D
    assert payloads_of(tmp_path) == [b"A" * 16, b"D" * 16]


def test_zero_filled_tail_and_empty_payloads(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="always") as log:
        log.append_many([b"", b"", b"z"])
    assert payloads_of(tmp_path) == [b"", b"", b"z"]


def multi_segment(d: Path) -> list[Path]:
    with Log.open(d, segment_size=1024, durability="never") as log:
        log.append_many([b"p%03d" % i + bytes(20) for i in range(200)])
    return sorted(d.glob("seg-*.log"))


def test_bad_frame_inside_sealed_segment_is_named_and_repair_cuts_there(tmp_path: Path) -> None:
    segs = multi_segment(tmp_path)
    assert len(segs) > 5
    victim = segs[2]
    base = int(victim.name[4:24])
    with open(victim, "r+b") as f:
        f.seek(HEADER_SIZE + 2 * frame_size(24) + 26)  # inside the 3rd frame's payload
        f.write(b"\xff")
    # Reading through it fails loudly, naming file, byte and offset
    with Log.open(tmp_path, segment_size=1024, durability="never") as log, pytest.raises(LogCorruptError) as exc:
        list(log.read(0))
    assert exc.value.path == str(victim) and exc.value.offset == base + 2
    assert exc.value.position == HEADER_SIZE + 2 * frame_size(24)
    assert "stalkd log repair" in str(exc.value) and victim.name in str(exc.value)
    # The reader API reports the same
    with pytest.raises(LogCorruptError):
        list(LogReader(tmp_path).read(0))
    # repair=True cuts there and moves later segments aside
    with Log.open(tmp_path, segment_size=1024, durability="never", repair=True) as log:
        rep = log.repair_report
        assert rep is not None and rep.offset == base + 2 and rep.path == str(victim)
        moved = [p for p in rep.dropped_files if p.endswith(".log")]
        (quarantine,) = [p for p in rep.dropped_files if not p.endswith(".log")]
        assert len(moved) == len(segs) - 3
        assert os.stat(quarantine).st_mode & 0o777 == 0o600
        # every record past the cut but the damaged one is still readable in what was dropped
        assert [o for o, _ in sorted(rep.salvaged)] == [o for o in range(base + 3, 200)]
        assert all(os.path.exists(p) for p in rep.dropped_files)
        assert log.next_offset == base + 2
        assert [f.bytes() for f in log.read(0)] == [b"p%03d" % i + bytes(20) for i in range(base + 2)]
        log.append(b"new")
    with Log.open(tmp_path, segment_size=1024, durability="never") as log:
        assert log.next_offset == base + 3 and log.repair_report is None


def test_damaged_footer_in_the_middle_refuses_to_open(tmp_path: Path) -> None:
    segs = multi_segment(tmp_path)
    victim = segs[1]
    size = victim.stat().st_size
    with open(victim, "r+b") as f:
        f.seek(size - FOOTER_SIZE + 30)
        f.write(b"\x01")  # footer CRC fails: the segment must be scanned
        f.seek(HEADER_SIZE + 5)
        f.write(b"\x01")  # ... and its first frame is bad
    with pytest.raises(LogCorruptError, match=victim.name):
        Log.open(tmp_path, segment_size=1024)
    with Log.open(tmp_path, segment_size=1024, repair=True) as log:
        assert log.next_offset == int(victim.name[4:24])


def test_footer_lost_but_frames_intact_is_resealed(tmp_path: Path) -> None:
    segs = multi_segment(tmp_path)
    victim = segs[1]
    with open(victim, "r+b") as f:
        f.seek(victim.stat().st_size - FOOTER_SIZE)
        f.write(bytes(FOOTER_SIZE))
    assert len(payloads_of(tmp_path)) == 200
    assert LogReader(tmp_path).segments()[1].sealed


def test_crash_during_roll_over(tmp_path: Path) -> None:
    # Given the state a crash leaves between creating the next segment and sealing the previous
    segs = multi_segment(tmp_path)
    last, prev = segs[-1], segs[-2]
    with open(prev, "r+b") as f:
        f.seek(prev.stat().st_size - FOOTER_SIZE)
        f.write(bytes(FOOTER_SIZE))
    with open(last, "r+b") as f:
        f.seek(HEADER_SIZE)
        f.write(bytes(last.stat().st_size - HEADER_SIZE))
    # Then the empty new segment goes, the previous one is active again and appends continue
    with Log.open(tmp_path, segment_size=1024, durability="always") as log:
        end = int(last.name[4:24])
        assert log.next_offset == end and not last.exists()
        assert log.append(b"next") == end
    assert payloads_of(tmp_path)[-1] == b"next"


def test_recovery_scans_only_the_active_segment(tmp_path: Path) -> None:
    # Given sealed segments whose frames are damaged (but footers intact)
    segs = multi_segment(tmp_path)
    for s in segs[:-1]:
        with open(s, "r+b") as f:
            f.seek(HEADER_SIZE + 30)
            f.write(b"\xff")
    # When opening, then no sealed frame was scanned (the damage goes unnoticed until read)
    with Log.open(tmp_path, segment_size=1024) as log:
        assert log.next_offset == 200
        assert [f.offset for f in log.read(199)] == [199]


def test_unknown_segment_version_is_a_clear_error(tmp_path: Path) -> None:
    make_log(tmp_path)
    with open(only_segment(tmp_path), "r+b") as f:
        f.seek(8)
        f.write(b"\x09\x00")
    with pytest.raises(LogCorruptError, match="CRC|version"):
        Log.open(tmp_path)


# --- faults through the file-system seam (stalkd.log.fs.Faults) where recovery and retention
# change files: the torn tail's zeroing, the footer a roll-over crash left unwritten, a repair's
# quarantine, a segment removal failing part-way. Each fault stops the operation; once the disk
# heals, the log opens with everything it had acknowledged.


def torn_log(d: Path) -> Path:
    """A closed one-segment log whose last frame is half-overwritten (a crash mid-write)."""
    start, _ = make_log(d)
    seg = only_segment(d)
    with open(seg, "r+b") as f:
        f.seek(start + 4)
        f.write(b"\xff" * 8)
    return seg


def test_a_failed_fsync_while_cutting_a_torn_tail_fails_the_open_and_a_retry_cuts_it(tmp_path: Path) -> None:
    seg = torn_log(tmp_path)
    fs = Faults()
    fs.fail("fdatasync", errno.EIO, match=seg.name, times=1)
    with pytest.raises(OSError, match="injected"):
        Log.open(tmp_path, durability="never", fs=fs)
    assert fs.failures == {"fdatasync": 1}
    with Log.open(tmp_path, durability="never", fs=fs) as log:  # the rule is used up
        assert log.next_offset == len(PAYLOADS) - 1
    assert payloads_of(tmp_path) == PAYLOADS[:-1]


def test_a_crash_before_the_torn_tail_is_zeroed_leaves_it_for_the_next_open(tmp_path: Path) -> None:
    seg = torn_log(tmp_path)
    fs = Faults()
    fs.crash_at("pwrite", match=seg.name)
    with pytest.raises(CrashPoint):
        Log.open(tmp_path, durability="never", fs=fs)
    assert fs.crashed is not None and seg.name in fs.crashed
    assert payloads_of(tmp_path) == PAYLOADS[:-1]


def test_a_failed_footer_write_after_a_roll_over_crash_is_retried_by_the_next_open(tmp_path: Path) -> None:
    segs = multi_segment(tmp_path)
    victim = segs[1]
    with open(victim, "r+b") as f:  # the footer a crash during the roll-over never wrote
        f.seek(victim.stat().st_size - FOOTER_SIZE)
        f.write(bytes(FOOTER_SIZE))
    fs = Faults()
    fs.fail("pwrite", errno.EIO, match=victim.name, times=1)
    with pytest.raises(OSError, match="injected"):
        Log.open(tmp_path, segment_size=1024, durability="never", fs=fs)
    with Log.open(tmp_path, segment_size=1024, durability="never", fs=fs) as log:
        assert log.next_offset == 200
        assert len(list(log.read(0))) == 200


def test_a_failed_quarantine_write_leaves_the_damage_for_a_second_repair(tmp_path: Path) -> None:
    make_log(tmp_path)
    seg = only_segment(tmp_path)
    with open(seg, "r+b") as f:  # a bad frame with a valid one after it: damage, not a torn tail
        f.seek(HEADER_SIZE + sum(frame_size(len(p)) for p in PAYLOADS[:-2]) + 4)
        f.write(b"\xff" * 8)
    fs = Faults()
    fs.fail("write", errno.ENOSPC, match="dropped", times=1)
    with pytest.raises(OSError, match="injected"):
        Log.open(tmp_path, durability="never", repair=True, fs=fs)
    assert fs.failures == {"write": 1}
    with Log.open(tmp_path, durability="never", repair=True, fs=fs) as log:
        rep = log.repair_report
        assert rep is not None and rep.dropped_files
        assert log.next_offset == len(PAYLOADS) - 2


@pytest.mark.parametrize("archive", [False, True])
def test_a_segment_removal_failing_part_way_keeps_the_log_dense(tmp_path: Path, archive: bool) -> None:
    """Retention removes several segments; the second removal fails. The segments not removed
    stay tracked (a later retain removes them), and the log still opens: before, they were
    forgotten and left on disk behind a gap in offsets, which the next open refused."""
    multi_segment(tmp_path)
    fs = Faults()
    op = "replace" if archive else "unlink"
    with Log.open(tmp_path, segment_size=1024, durability="never", archive=archive, fs=fs) as log:
        first_end = log.segment_bounds()[0][1]
        assert first_end is not None and first_end < 100
        fs.crash_at(op, match="seg-", nth=2)
        with pytest.raises(CrashPoint):
            log.retain(150)
        fs.heal()
        assert log.segment_bounds()[0][0] == first_end  # the first segment went, nothing after it
        log.append(b"after")
    with Log.open(tmp_path, segment_size=1024, durability="never", archive=archive) as log:
        assert log.segment_bounds()[0][0] == first_end
        assert [f.offset for f in log.read(first_end)] == list(range(first_end, 201))
        assert log.retain(150)  # the rest go now
        assert log.segment_bounds()[0][0] > first_end


def test_a_repair_never_replaces_what_an_earlier_repair_dropped(tmp_path: Path) -> None:
    # Given dropped/ holding a segment an earlier repair moved there, and a later segment of the
    # same name (the log went on past the first cut and wrote that offset again)
    root = tmp_path / "log"
    (root / DROPPED_DIR).mkdir(parents=True)
    (root / DROPPED_DIR / "seg-00000000000000000100.log").write_bytes(b"the first repair's")
    (root / "seg-00000000000000000100.log").write_bytes(b"the second repair's")
    # When a repair drops it too
    rep = cut(REAL, str(root), [str(root / "seg-00000000000000000100.log")], [], 0, None, 0, 100, "test")
    # Then both copies are kept (a repair deletes nothing), the second under a free name
    kept = sorted(p.read_bytes() for p in (root / DROPPED_DIR).iterdir())
    assert kept == [b"the first repair's", b"the second repair's"]
    assert rep.dropped_files == (str(root / DROPPED_DIR / "seg-00000000000000000100.log.1"),)
