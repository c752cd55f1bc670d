"""The high-water mark (``stalkd.log.mark``): written at open, at each roll-over and by its thread,
never per append; a failed mark write is a warning, not a failed log; a damaged mark is refused
by name and a repair writes a new one; a torn slot falls back to the other. Faults go through the
file-system seam; damage is written into the real files."""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

import pytest

from stalkd.log import Log, LogCorruptError
from stalkd.log.fs import Faults
from stalkd.log.mark import MARK_NAME, MarkError, read_mark


class CountingFs(Faults):
    """Faults that also counts fdatasync calls by the file they sync."""

    def __init__(self) -> None:
        super().__init__()
        self.synced: dict[str, int] = {}

    def fdatasync(self, fd: int) -> None:
        name = os.path.basename(self.path_of(fd))
        self.synced[name] = self.synced.get(name, 0) + 1
        super().fdatasync(fd)


def test_the_mark_follows_rolls_not_appends(tmp_path: Path) -> None:
    fs = CountingFs()
    with Log.open(tmp_path, segment_size=8192, durability="always", fs=fs) as log:
        assert read_mark(str(tmp_path)) == 0
        opened = fs.synced.get(MARK_NAME, 0)
        for i in range(500):
            log.append(b"record %04d " % i + b"x" * 40)
        rolls = len(log.segment_bounds()) - 1
        assert rolls >= 3
        # Then one mark write per roll-over, none for the 500 appends (each fsynced)
        assert fs.synced.get(MARK_NAME, 0) - opened == rolls
        assert sum(n for name, n in fs.synced.items() if name.startswith("seg-")) >= 500
        assert read_mark(str(tmp_path)) == log.segment_bounds()[-1][0]


def test_the_marker_thread_raises_the_mark_to_the_durable_end(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="always", mark_interval=0.01) as log:
        log.append_many([b"a"] * 10)
        deadline = time.monotonic() + 30
        while read_mark(str(tmp_path)) != 10:
            assert time.monotonic() < deadline, "the mark never reached the durable end"
            time.sleep(0.01)


def test_a_failed_mark_write_is_a_warning_and_is_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fs = Faults()
    with Log.open(tmp_path, segment_size=8192, durability="always", fs=fs) as log:
        fs.fail("fdatasync", errno.EIO, match=MARK_NAME)
        with caplog.at_level(logging.WARNING):
            log.append_many([b"y" * 100] * 200)  # several roll-overs
        assert "could not write the high-water mark" in caplog.text
        assert log.next_offset == 200  # the records are written and durable: only the mark is late
        fs.heal()
        log.append_many([b"z" * 100] * 100)
        assert read_mark(str(tmp_path)) == log.segment_bounds()[-1][0] > 0
    with Log.open(tmp_path, segment_size=8192) as log:
        assert log.next_offset == 300


def test_a_damaged_mark_is_refused_by_name_and_repaired(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="always") as log:
        log.append_many([b"a"] * 5)
    (tmp_path / MARK_NAME).write_bytes(b"\xa5" * 128)
    with pytest.raises(MarkError, match=f"stalkd log repair {tmp_path}"):
        Log.open(tmp_path)
    with Log.open(tmp_path, repair=True) as log:
        assert log.next_offset == 5
    assert read_mark(str(tmp_path)) == 5


def test_a_torn_slot_falls_back_to_the_other(tmp_path: Path) -> None:
    with Log.open(tmp_path, segment_size=8192, durability="always") as log:
        log.append_many([b"r" * 100] * 300)  # rolls: the mark is written more than once
    before = read_mark(str(tmp_path))
    assert before is not None and before > 0
    data = bytearray((tmp_path / MARK_NAME).read_bytes())
    newest = max((0, 64), key=lambda at: int.from_bytes(data[at + 8 : at + 16], "little"))
    data[newest + 20] ^= 0xFF
    (tmp_path / MARK_NAME).write_bytes(bytes(data))
    older = read_mark(str(tmp_path))
    assert older is not None and older < before
    with Log.open(tmp_path, segment_size=8192) as log:  # the older mark is still below the end
        assert log.next_offset == 300


def test_a_repair_lowers_the_mark_to_where_it_cut(tmp_path: Path) -> None:
    with Log.open(tmp_path, segment_size=8192, durability="always") as log:
        log.append_many([b"s" * 100] * 300)
        active = Path(log.segment_bounds()[-1][2])
        mark = read_mark(str(tmp_path))
    assert mark is not None and mark > 0
    # Given the last sealed segment's successor gone and the active segment too: below the mark
    active.unlink()
    with pytest.raises(LogCorruptError):
        Log.open(tmp_path, segment_size=8192)
    with Log.open(tmp_path, segment_size=8192, repair=True) as log:
        end = log.next_offset
    assert read_mark(str(tmp_path)) == end
    with Log.open(tmp_path, segment_size=8192) as log:
        assert log.next_offset == end
