"""The power-loss file system (campaign/powerfs.py) on real files: after a cut only what was
made durable is there: file data once fsynced or fdatasynced, and (strict) a directory's
entries once the directory is fsynced."""

from __future__ import annotations

import os

from campaign.powerfs import PowerFS


def _write(path: str, data: bytes, *, sync: bool = True) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_unsynced_data_is_gone_after_a_cut_and_synced_data_kept(strict: PowerFS) -> None:
    m = strict.mountpoint
    fd = os.open(f"{m}/f", os.O_CREAT | os.O_RDWR, 0o600)
    os.write(fd, b"synced")
    os.fsync(fd)
    os.pwrite(fd, b"S", 0)  # over synced data, then past it: neither survives
    os.write(fd, b"+tail")
    fd2 = os.open(f"{m}/g", os.O_CREAT | os.O_RDWR, 0o600)
    os.write(fd2, b"datasynced")
    os.fdatasync(fd2)
    _sync_dir(m)
    os.close(fd)
    os.close(fd2)
    assert _read(f"{m}/f") == b"Synced+tail"  # before the cut the program sees all it wrote
    strict.cut()
    assert _read(f"{m}/f") == b"synced"
    assert _read(f"{m}/g") == b"datasynced"


def test_a_new_entry_is_durable_only_once_its_directory_is_fsynced(strict: PowerFS) -> None:
    m = strict.mountpoint
    _write(f"{m}/kept", b"k")
    os.mkdir(f"{m}/d")
    _sync_dir(m)
    _write(f"{m}/unlisted", b"u")  # its data fsynced, its name not
    _write(f"{m}/d/inner", b"i")
    _sync_dir(f"{m}/d")
    os.mkdir(f"{m}/d/sub")  # d fsynced before it: sub and what is in it are lost
    _write(f"{m}/d/sub/deep", b"x")
    _sync_dir(f"{m}/d/sub")
    strict.cut()
    assert sorted(os.listdir(m)) == ["d", "kept"]
    assert os.listdir(f"{m}/d") == ["inner"]
    assert _read(f"{m}/d/inner") == b"i"


def test_unlink_and_rename_wait_for_the_directory_fsync(strict: PowerFS) -> None:
    m = strict.mountpoint
    _write(f"{m}/a", b"old a")
    _write(f"{m}/b", b"old b")
    _sync_dir(m)
    os.unlink(f"{m}/a")
    _write(f"{m}/b.tmp", b"new b")
    os.replace(f"{m}/b.tmp", f"{m}/b")  # the classic replace, without the directory fsync
    strict.cut()
    assert sorted(os.listdir(m)) == ["a", "b"]
    assert _read(f"{m}/a") == b"old a"  # the unlinked file is back, with its synced data
    assert _read(f"{m}/b") == b"old b"
    _write(f"{m}/b.tmp", b"new b")
    os.replace(f"{m}/b.tmp", f"{m}/b")
    os.unlink(f"{m}/a")
    _sync_dir(m)
    strict.cut()
    assert os.listdir(m) == ["b"]
    assert _read(f"{m}/b") == b"new b"


def test_a_renamed_file_keeps_its_data_without_its_new_name(strict: PowerFS) -> None:
    """A rename across directories with only the target fsynced: both names survive, one file
    (POSIX allows it; a recovery that assumes a rename is atomic across directories is wrong)."""
    m = strict.mountpoint
    os.mkdir(f"{m}/x")
    os.mkdir(f"{m}/y")
    _write(f"{m}/x/f", b"data")
    for d in (m, f"{m}/x", f"{m}/y"):
        _sync_dir(d)
    os.rename(f"{m}/x/f", f"{m}/y/f")
    _sync_dir(f"{m}/y")
    strict.cut()
    assert _read(f"{m}/x/f") == _read(f"{m}/y/f") == b"data"
    assert os.stat(f"{m}/x/f").st_ino == os.stat(f"{m}/y/f").st_ino


def test_truncate_and_preallocation_are_undone_unless_synced(strict: PowerFS) -> None:
    m = strict.mountpoint
    _write(f"{m}/seg", b"a" * 10000)
    _write(f"{m}/short", b"b" * 10000)
    _sync_dir(m)
    fd = os.open(f"{m}/seg", os.O_RDWR)
    os.posix_fallocate(fd, 0, 65536)  # a segment's reservation, never synced
    os.close(fd)
    fd = os.open(f"{m}/short", os.O_RDWR)
    os.ftruncate(fd, 100)
    os.ftruncate(fd, 5000)  # shrunk then grown: zeros from 100 on, and that is synced
    os.fsync(fd)
    os.close(fd)
    fd = os.open(f"{m}/seg", os.O_RDWR)
    assert os.fstat(fd).st_size == 65536
    os.ftruncate(fd, 10)  # cut short, never synced
    os.close(fd)
    strict.cut()
    assert _read(f"{m}/seg") == b"a" * 10000
    assert _read(f"{m}/short") == b"b" * 100 + bytes(4900)


def test_lenient_mode_keeps_entries_at_once_but_not_data(lenient: PowerFS) -> None:
    m = lenient.mountpoint
    _write(f"{m}/f", b"lost", sync=False)
    os.mkdir(f"{m}/d")
    _write(f"{m}/d/g", b"kept")
    lenient.cut()
    assert sorted(os.listdir(m)) == ["d", "f"]
    assert _read(f"{m}/f") == b""
    assert _read(f"{m}/d/g") == b"kept"


def test_a_clean_unmount_keeps_everything(strict: PowerFS) -> None:
    m = strict.mountpoint
    _write(f"{m}/f", b"never synced", sync=False)
    strict.stop()
    strict.start()
    assert _read(f"{m}/f") == b"never synced"
    strict.cut()  # what the clean shutdown kept is durable from then on
    assert _read(f"{m}/f") == b"never synced"
