"""The power-loss campaign's log findings (campaign/logcut.py), replayed at the moment that
matters on a strict powerfs mount: what a power cut keeps is only what was fsynced (data) and
what its directory's fsync listed (names)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from campaign.powerfs import PowerFS

from stalkd.log import Log
from stalkd.log.segment import SegmentView, segment_name

CHILD = Path(__file__).resolve().parents[1] / "log" / "sealcut_child.py"
SEGMENT = 4096  # sealcut_child.py's


def _records(path: str) -> list[tuple[int, int]]:
    with Log.open(path, segment_size=SEGMENT, durability="never") as log:
        return [(f.offset, int(bytes(f.payload).split(b":", 1)[0])) for f in log.read(0)]


def test_kill_between_footer_and_its_fdatasync_then_power_cut(strict: PowerFS, tmp_path: Path) -> None:
    """The campaign's restart failure under ``never`` (about one run in twenty): a writer killed
    after storing a segment's footer (mmap) but before its fdatasync, the next one going on over
    several sealed segments, then a power cut: the log opens with every sealed record."""
    log_dir = os.path.join(strict.mountpoint, "log")
    first = segment_name(0)
    proc = subprocess.run([sys.executable, str(CHILD), log_dir, str(tmp_path / "shadow"), "1000",
                           f"fdatasync:{first}:1"], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    view = SegmentView(os.path.join(log_dir, first))
    try:
        assert view.footer is not None  # the kill landed after the footer's store
    finally:
        view.close()
    with Log.open(log_dir, segment_size=SEGMENT, durability="never") as log:
        for _ in range(200):
            log.append(b"%d:" % log.next_offset + b"." * 100)
        durable_end = log.segment_bounds()[-2][1]
    assert durable_end is not None
    strict.cut()
    seqs = _records(log_dir)
    assert [o for o, _ in seqs] == list(range(len(seqs))) and all(o == s for o, s in seqs)
    assert len(seqs) >= durable_end


def test_repair_moves_to_dropped_survive_a_power_cut(strict: PowerFS) -> None:
    """A repair deletes nothing: the segments it moves beyond a cut into ``dropped/`` are there
    after a power cut too (the campaign found ``dropped/`` empty after one)."""
    log_dir = os.path.join(strict.mountpoint, "log")
    with Log.open(log_dir, segment_size=SEGMENT, durability="never") as log:
        for _ in range(200):
            log.append(b"%d:" % log.next_offset + b"." * 100)
        bounds = log.segment_bounds()
    damaged, later = bounds[1][2], [os.path.basename(p) for _, _, p in bounds[2:]]
    fd = os.open(damaged, os.O_RDWR)
    try:  # as the campaign left one: its header only (nothing beyond the cut to quarantine)
        os.pwrite(fd, bytes(SEGMENT - 64), 64)
        os.fsync(fd)
    finally:
        os.close(fd)
    with Log.open(log_dir, segment_size=SEGMENT, durability="never", repair=True) as log:
        assert log.next_offset < bounds[1][1]
    strict.cut()
    kept = os.listdir(os.path.join(log_dir, "dropped"))
    assert set(later) <= set(kept), kept
