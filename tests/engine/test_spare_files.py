"""Spare segments are files of their own, renamed into place (issue 11 item 3): room promised to
deletes cannot be taken by another process at the moment the log starts a segment. On a real
4 MiB tmpfs this test mounts (skipped where mounting is not allowed)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalkd.engine.space import SHORT_FRAME, put_frame
from stalkd.log.fs import Faults
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Delete, Put
from support import small_tmpfs

T = 1_700_000_000.0
SEG = 256 * 1024


@pytest.fixture
def fs4(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path, "4m") as mnt:
        yield mnt


def hog(path: Path) -> None:
    """Another writer on the same file system taking every free byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\1" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)


class _HogAtRollOver(Faults):
    """The file system, where another process takes every free byte just before the log
    allocates a new segment file (while ``armed``)."""

    armed = False
    hog_path = Path()

    def allocate(self, fd: int, offset: int, size: int) -> None:
        if self.armed and self.path_of(fd).endswith(".log.tmp"):
            hog(self.hog_path)
        super().allocate(fd, offset, size)


def test_room_promised_to_deletes_survives_another_writer_at_the_roll_over(fs4: Path) -> None:
    disk = _HogAtRollOver()
    disk.hog_path = fs4 / "hog"
    wal = Wal.open(fs4 / "data", durability="never", segment_size=SEG, background=False, fs=disk)
    eng, _ = wal.recover(now=T)
    eng.connect(1, T)
    ids = []
    # (spares alone: the snapshot reserve growing with the live data, which refuses a spare
    # before the disk is full, is tests/server/test_full_disk_clears.py's)
    assert wal.space is not None
    wal.space.before_grow = None
    # Given puts admitted until the file system is full (spares hold their deletes' room)
    cost = put_frame(600, len("default")) + SHORT_FRAME  # what the server promises for a put
    while True:
        if not wal.admit(cost):
            break
        out = eng.apply(1, Put(0, 0, 60, b"p" * 600), T)
        wal.settle(cost, out.records)
        wal.write(out.records)
        ids.append(out.records[0].job_id)
    assert wal.space is not None and wal.space.spares >= 1 and len(ids) > 100
    # When another process takes every byte freed at the moment the log starts a segment
    disk.armed = True
    hog(fs4 / "hog")
    # Then every delete (its room was promised by its put) is still written
    for jid in ids:
        wal.write(eng.apply(1, Delete(jid), T).records)
    wal.sync()
    wal.close()
    with Wal.open(fs4 / "data", durability="never", segment_size=SEG) as again:
        e2, _ = again.recover(now=T)
        assert not e2.jobs
