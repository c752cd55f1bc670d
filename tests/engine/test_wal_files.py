"""A server data directory (the WAL's): private modes, no symbolic links, faults through the seam."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalkd.log.fs import Faults, SymlinkError
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Put

T0 = 1_700_000_000.0


@pytest.fixture(autouse=True)
def _permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    yield
    os.umask(old)


def _fill(wal: Wal, n: int) -> None:
    e, _ = wal.recover(T0)
    e.connect(1, T0)
    for i in range(n):
        out = e.apply(1, Put(0, 0, 60, b"j%d" % i), T0)
        wal.write(out.records)
    wal.sync()
    wal.snapshot(e)


def test_every_file_0600_every_directory_0700(tmp_path: Path) -> None:
    d = tmp_path / "data"
    with Wal.open(d, durability="always", segment_size=8192) as wal:
        _fill(wal, 50)
    files = [p for p in d.rglob("*") if p.is_file()]
    dirs = [d] + [p for p in d.rglob("*") if p.is_dir()]
    assert "LOCK" in {p.name for p in files} and any(p.suffix == ".snap" for p in files)
    assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in files if stat.S_IMODE(p.stat().st_mode) != 0o600} == {}
    assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in dirs if stat.S_IMODE(p.stat().st_mode) != 0o700} == {}


@pytest.mark.parametrize("name", ["snapshots", "wal"])
def test_a_data_directory_holding_a_symlink_is_refused(tmp_path: Path, name: str) -> None:
    d = tmp_path / "data"
    with Wal.open(d, durability="never") as wal:
        _fill(wal, 3)
    target = tmp_path / "elsewhere"
    os.replace(d / name, target)
    (d / name).symlink_to(target)
    with pytest.raises(SymlinkError, match=f"{name} is a symbolic link"):
        Wal.open(d)


def test_a_snapshot_whose_fsync_fails_is_not_installed(tmp_path: Path) -> None:
    fs = Faults()
    with Wal.open(tmp_path, durability="never", fs=fs, background=False) as wal:
        e, _ = wal.recover(T0)
        e.connect(1, T0)
        wal.write(e.apply(1, Put(0, 0, 60, b"kept"), T0).records)
        fs.fail("fsync", errno.EIO, match=".snap.tmp")
        with pytest.raises(OSError, match="Input/output error"):
            wal.snapshot(e)
        fs.heal()
    left = [p.name for p in (tmp_path / "snapshots").iterdir()]
    assert not [n for n in left if n.startswith("snap-")], left  # neither the file nor its .tmp
    with Wal.open(tmp_path, durability="never") as wal:
        e, info = wal.recover(T0)
        assert [j.body for j in e.jobs.values()] == [b"kept"] and info.snapshot is None
