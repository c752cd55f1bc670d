"""The log's edges (issue 30): damage to what was acknowledged is refused by name, never read as a
torn tail or an empty log; a write a crash interrupted above the high-water mark still recovers
by itself. Each data directory is left as kill -9 leaves it (``Wal.abandon``) once the mark
covers the acknowledged jobs, then damaged on its real files."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stalkd.log import LogCorruptError
from stalkd.log.frame import frame_size
from stalkd.log.mark import MARK_NAME, read_mark
from stalkd.log.segment import HEADER_SIZE
from stalkd.persist.wal import Wal, WalError
from stalkd.protocol.commands import Put
from support import wait_until

T = 1_700_000_000.0
N = 200


def body(i: int, size: int) -> bytes:
    return bytes(size) if size > 100 else b"job %05d " % i + b"x" * (size - 10)


def crashed_after_acks(d: Path, n: int = N, size: int = 100, unsynced: int = 0) -> int:
    """A data directory holding ``n`` acknowledged puts (fsynced, and the mark written past them)
    and ``unsynced`` more written but not yet acknowledged, left as kill -9 leaves it. Returns the
    log's end offset."""
    wal = Wal.open(d, durability="always")
    eng, _ = wal.recover(now=T)
    eng.connect(1, T)
    for i in range(n):
        wal.write(eng.apply(1, Put(0, 0, 60, body(i, size)), T).records)
    wal.sync()
    acked = wal.log.next_offset
    wait_until(lambda: read_mark(str(d / "wal")) == acked, "the high-water mark to cover the acknowledged puts")
    for i in range(unsynced):
        wal.write(eng.apply(1, Put(0, 0, 60, body(n + i, size)), T).records)
    end = wal.log.next_offset
    wal.abandon()
    return end


def segments(d: Path) -> list[Path]:
    return sorted((d / "wal").glob("seg-*.log"))


def flip_last_byte(d: Path) -> None:
    """One bit flipped in the last non-zero byte of the only segment (its last frame's body)."""
    (seg,) = segments(d)
    with open(seg, "r+b") as f:
        data = f.read()
        last = len(data.rstrip(b"\0"))
        f.seek(last - 1)
        f.write(bytes([data[last - 1] ^ 0x01]))


def jobs_after_repair(d: Path) -> int:
    with Wal.open(d, repair=True) as wal:
        eng, _ = wal.recover(now=T)
        return len(eng.jobs)


def refused(d: Path) -> str:
    with pytest.raises((LogCorruptError, WalError)) as exc:
        Wal.open(d)
    msg = str(exc.value)
    assert f"stalkd log repair {d}" in msg
    return msg


def test_deleted_segments_before_the_first_snapshot_are_refused_not_an_empty_start(tmp_path: Path) -> None:
    crashed_after_acks(tmp_path)
    # Given every WAL segment deleted (the mark, LOCK and spares stay)
    for seg in segments(tmp_path):
        seg.unlink()
    # Then the WAL refuses to open, naming the mark and the command
    msg = refused(tmp_path)
    assert "no segment file" in msg and MARK_NAME in msg and "up to offset" in msg
    # And the inspection says so too
    r = subprocess.run([sys.executable, "-m", "stalkd.cli", "log", "inspect", "--verify", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 1 and "no segment file" in r.stdout, r.stdout
    # When repaired, the data directory starts (empty: nothing of it is left), and stays open
    assert jobs_after_repair(tmp_path) == 0
    with Wal.open(tmp_path) as wal:
        wal.recover(now=T)


def test_deleted_segments_and_mark_are_refused_by_the_snapshot_reserve(tmp_path: Path) -> None:
    crashed_after_acks(tmp_path)
    for seg in segments(tmp_path):
        seg.unlink()
    (tmp_path / "wal" / MARK_NAME).unlink()
    assert (tmp_path / "snapshots" / "reserve.spare").exists()
    msg = refused(tmp_path)
    assert "no WAL segment file" in msg or "spare segments" in msg
    assert jobs_after_repair(tmp_path) == 0


def test_active_segment_zeroed_from_its_middle_is_refused(tmp_path: Path) -> None:
    crashed_after_acks(tmp_path)
    (seg,) = segments(tmp_path)
    with open(seg, "r+b") as f:
        data = f.read()
        middle = (HEADER_SIZE + len(data.rstrip(b"\0"))) // 2
        f.seek(middle)
        f.write(bytes(len(data) - middle))
    msg = refused(tmp_path)
    assert "high-water mark" in msg and "acknowledged record" in msg
    left = jobs_after_repair(tmp_path)
    assert 0 < left < N


def test_truncated_inside_a_zero_filled_body_is_refused_not_cut_as_torn(tmp_path: Path) -> None:
    crashed_after_acks(tmp_path, size=4000)
    (seg,) = segments(tmp_path)
    # Given the active segment cut 1000 bytes into the body of its 195th frame (all zeros)
    with open(seg, "rb") as f:
        data = f.read()
    frame = 0
    pos = HEADER_SIZE
    while frame < 194:  # walk the frames by their length field (bytes 8-11 of the header)
        pos += frame_size(int.from_bytes(data[pos + 8 : pos + 12], "little"))
        frame += 1
    os.truncate(seg, pos + 1000)
    msg = refused(tmp_path)
    assert "high-water mark" in msg or "cut short" in msg
    assert jobs_after_repair(tmp_path) == 194


def test_a_flipped_byte_in_the_last_acknowledged_frame_is_refused(tmp_path: Path) -> None:
    crashed_after_acks(tmp_path)
    flip_last_byte(tmp_path)
    msg = refused(tmp_path)
    assert f"ends at offset {N - 1}" in msg and f"up to offset {N}" in msg
    assert jobs_after_repair(tmp_path) == N - 1


def test_a_torn_write_above_the_mark_recovers_by_itself(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given 200 acknowledged puts and 5 more written (not acknowledged) when the process died,
    # the last of them torn
    end = crashed_after_acks(tmp_path, unsynced=5)
    assert end == N + 5
    flip_last_byte(tmp_path)
    # Then the WAL opens without a repair: the torn frame is cut with a warning, nothing acknowledged lost
    with caplog.at_level(logging.WARNING), Wal.open(tmp_path) as wal:
        eng, _ = wal.recover(now=T)
        assert len(eng.jobs) == N + 4
    assert "torn tail cut" in caplog.text
