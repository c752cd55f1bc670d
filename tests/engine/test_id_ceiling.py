"""Job ids are never handed out twice: under ``every``/``never`` a power cut may take puts that
were acknowledged from the page cache, and their ids must not be given to other jobs after the
restart (persist/idceiling.py). The power cut is played on real files: the log directory goes
back to a copy taken before the puts, as the disk would after losing what was never fsynced,
while the ceiling file, fsynced before any of those ids was shown, stays."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from stalkd.persist.idceiling import ID_BLOCK, IDS_NAME
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Put

T = 1_700_000_000.0


def put(wal: Wal, eng: object, body: bytes) -> int:
    out = eng.apply(1, Put(0, 0, 60, body), T)  # type: ignore[attr-defined]
    wal.write(out.records)
    return int(out.reply.args[0])


def open_engine(d: Path, durability: str) -> tuple[Wal, object]:
    wal = Wal.open(str(d), durability=durability)
    eng, _ = wal.recover(now=T)
    eng.connect(1, T)
    return wal, eng


def power_cut_after(d: Path, durability: str, n: int) -> list[int]:
    """Put ``n`` jobs after a copy of the log was taken, then lose the log back to that copy."""
    wal, eng = open_engine(d, durability)
    put(wal, eng, b"durable")
    wal.sync()
    wal.close()
    before = d.parent / f"{d.name}-log-before"
    shutil.copytree(d / "wal", before)
    wal, eng = open_engine(d, durability)
    ids = [put(wal, eng, b"job %d" % i) for i in range(n)]
    wal.abandon()
    shutil.rmtree(d / "wal")
    shutil.copytree(before, d / "wal")  # the page cache is gone: the log as it last reached the disk
    return ids


@pytest.mark.parametrize("durability", ["never", "every:1000"])
def test_ids_of_puts_a_power_cut_took_are_not_handed_out_again(tmp_path: Path, durability: str,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "data"
    lost = power_cut_after(d, durability, 5)
    with caplog.at_level(logging.INFO):
        wal, eng = open_engine(d, durability)
    assert not set(eng.jobs) & set(lost)  # they are gone with the cut
    fresh = put(wal, eng, b"after the cut")
    wal.close()
    assert fresh > max(lost)
    assert any("are not reused" in r.getMessage() for r in caplog.records)


def test_always_keeps_no_ceiling_and_ids_stay_dense(tmp_path: Path) -> None:
    d = tmp_path / "data"
    wal, eng = open_engine(d, "always")
    first = [put(wal, eng, b"x") for _ in range(3)]
    wal.sync()
    wal.close()
    wal, eng = open_engine(d, "always")
    assert put(wal, eng, b"y") == max(first) + 1
    wal.close()
    assert not (d / IDS_NAME).exists()


def test_a_ceiling_is_raised_a_block_at_a_time(tmp_path: Path) -> None:
    d = tmp_path / "data"
    wal, eng = open_engine(d, "never")
    ids = [put(wal, eng, b"x") for _ in range(10)]
    assert wal.id_ceiling == ids[0] + 1 + ID_BLOCK  # one raise covered all ten
    wal.close()


def test_a_damaged_ceiling_file_is_reported_and_the_server_starts(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "data"
    wal, eng = open_engine(d, "never")
    put(wal, eng, b"x")
    wal.close()
    with open(d / IDS_NAME, "r+b") as f:
        f.write(bytes(os.path.getsize(d / IDS_NAME)))  # both slots zeroed
    with caplog.at_level(logging.WARNING):
        wal, eng = open_engine(d, "never")
    assert put(wal, eng, b"y") == 2  # the log's next id: no ceiling was left to skip to
    wal.close()
    assert any("id ceiling is unreadable" in r.getMessage() for r in caplog.records)


def test_a_clean_stop_leaves_no_gap_in_the_ids(tmp_path: Path) -> None:
    d = tmp_path / "data"
    wal, eng = open_engine(d, "never")
    last = max(put(wal, eng, b"x") for _ in range(3))
    assert wal.final_snapshot(eng) is None  # a clean stop
    wal.close()
    wal, eng = open_engine(d, "never")
    assert put(wal, eng, b"y") == last + 1
    wal.close()
