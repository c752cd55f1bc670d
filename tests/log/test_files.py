"""Files and directories a log makes: private modes, and never a symbolic link followed."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalkd.log import Log, LogError
from stalkd.log.active import SPARES_DIR, make_spare
from stalkd.log.fs import FileSystem, SymlinkError


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture(autouse=True)
def _permissive_umask() -> Iterator[None]:
    """With umask 0 every mode bit a file is created with shows: only the code's mode protects."""
    old = os.umask(0)
    yield
    os.umask(old)


def test_files_are_created_0600_and_directories_0700(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with Log.open(d, segment_size=4096, durability="always", archive=True) as log:
        log.append_many([b"x" * 100] * 100)  # several segments
        g = log.group("g")
        g.ack(*g.poll(100))
        assert log.retain(100)  # archives the sealed segments below the floor
    files = [p for p in d.rglob("*") if p.is_file()]
    dirs = [d] + [p for p in d.rglob("*") if p.is_dir()]
    names = {p.name for p in files} | {p.name for p in dirs}
    assert {"LOCK", "g.cur", "groups", "archive"} <= names
    assert any(n.startswith("seg-") for n in names)
    assert {p.name: oct(_mode(p)) for p in files if _mode(p) != 0o600} == {}
    assert {p.name: oct(_mode(p)) for p in dirs if _mode(p) != 0o700} == {}


def test_every_directory_made_on_the_way_to_a_log_is_0700(tmp_path: Path) -> None:
    """``-b /srv/new/stalkd``: the directories made above the log are as private as the log's
    (os.makedirs gives its mode to the last one only)."""
    d = tmp_path / "a" / "b" / "log"
    with Log.open(d, segment_size=4096, durability="always"):
        pass
    assert {p.name: oct(_mode(p)) for p in (tmp_path / "a", tmp_path / "a" / "b", d)
            if _mode(p) != 0o700} == {}


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious data\n")
    d = tmp_path / "log"
    d.mkdir()
    (d / "LOCK").symlink_to(victim)
    with pytest.raises(SymlinkError, match="LOCK is a symbolic link"):
        Log.open(d)
    assert victim.read_bytes() == b"precious data\n"


@pytest.mark.parametrize("name", ["seg-00000000000000000000.log", "groups", "archive"])
def test_a_log_directory_holding_a_symlink_is_refused(tmp_path: Path, name: str) -> None:
    d = tmp_path / "log"
    with Log.open(d, durability="never") as log:
        log.append(b"x")
    target = tmp_path / "elsewhere"
    if name.startswith("seg-"):
        os.replace(d / name, target)
    else:
        target.mkdir()
        if (d / name).exists():
            os.rmdir(d / name)
    (d / name).symlink_to(target)
    with pytest.raises(LogError, match=f"{name} is a symbolic link"):
        Log.open(d)


def test_a_cursor_file_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with Log.open(d, durability="never") as log:
        log.group("g")
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    os.unlink(d / "groups" / "g.cur")
    (d / "groups" / "g.cur").symlink_to(victim)
    with pytest.raises(SymlinkError):
        Log.open(d)
    assert victim.read_bytes() == b"keep"


def test_the_log_directory_itself_may_be_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    link = tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    with Log.open(link, durability="never") as log:
        log.append(b"x")
    with Log.open(link) as log:
        assert [f.bytes() for f in log.read(0)] == [b"x"]


class _DirSyncs(FileSystem):
    """The real file system, noting which directories were fsynced (and the renames, in order)."""

    def __init__(self) -> None:
        self.synced: list[str] = []
        self.calls: list[tuple[str, str]] = []
        self.paths: dict[int, str] = {}

    def fsync_dir(self, path: str) -> None:
        self.synced.append(os.path.abspath(path))
        self.calls.append(("fsync_dir", os.path.abspath(path)))
        super().fsync_dir(path)

    def replace(self, src: str, dst: str) -> None:
        self.calls.append(("replace", os.path.abspath(src)))
        super().replace(src, dst)

    def open(self, path: str, flags: int, *, create: bool = False, truncate: bool = False) -> int:
        fd = super().open(path, flags, create=create, truncate=truncate)
        self.paths[fd] = os.path.abspath(path)
        return fd

    def fdatasync(self, fd: int) -> None:
        self.calls.append(("fdatasync", self.paths.get(fd, "")))
        super().fdatasync(fd)


def test_each_directory_a_log_makes_has_its_entry_made_durable(tmp_path: Path) -> None:
    """Where new entries are durable only once their directory is fsynced (strict POSIX), an
    unsynced parent would lose a fresh log, and every job it made durable, at a power cut
    (found by the power-loss campaign: campaign/powerfs.py --strict)."""
    fs = _DirSyncs()
    d = tmp_path / "a" / "b" / "log"
    with Log.open(d, segment_size=4096, durability="always", fs=fs) as log:
        log.append(b"x")
    assert {str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a" / "b")} <= set(fs.synced)
    again = _DirSyncs()
    with Log.open(d, segment_size=4096, durability="always", fs=again):
        pass
    assert str(tmp_path) not in again.synced  # nothing made, nothing to sync above the log


def test_a_spare_taken_for_a_segment_leaves_its_directory_durably_first(tmp_path: Path) -> None:
    """Renamed out of spares/ into the log's directory, a spare must be gone from spares/ on
    disk before a segment header is written into it: with only the log's directory fsynced, a
    power cut may leave it under both names and the next start takes it again, writing over
    that segment (the campaign's strict file system found it; the server refused to start)."""
    d = str(tmp_path / "log")
    size = 4096
    with Log.open(d, segment_size=size, durability="always"):
        pass
    make_spare(d, size)
    fs = _DirSyncs()
    with Log.open(d, segment_size=size, durability="always", fs=fs) as log:
        log.append_many([b"x" * 1000] * 8)  # rolls over into the spare
    spare_dir = os.path.join(d, SPARES_DIR)
    taken = [i for i, (op, path) in enumerate(fs.calls) if op == "replace" and path.startswith(spare_dir)]
    assert taken, fs.calls
    assert fs.calls[taken[0] + 1] == ("fsync_dir", spare_dir)


@pytest.mark.parametrize("durability", ["never", "every:50", "always"])
def test_a_new_segment_is_on_disk_before_its_name_whatever_the_policy(tmp_path: Path, durability: str) -> None:
    """Under never, a later fsync of the directory (a compaction's, a new group's) makes a new
    segment's name durable; its header must be there first, or a power cut leaves an empty
    segment that recovery refuses as damage (found by the campaign: a server under never that
    would not start without a repair)."""
    fs = _DirSyncs()
    d = str(tmp_path / "log")
    with Log.open(d, segment_size=4096, durability=durability, fs=fs) as log:
        log.append_many([b"x" * 1000] * 8)  # a roll: a second segment
    made = [path for op, path in fs.calls if op == "replace" and path.endswith(".log.tmp")]
    assert len(made) >= 2
    for tmp in made:
        at = fs.calls.index(("replace", tmp))
        assert ("fdatasync", tmp) in fs.calls[:at], tmp


def test_a_sealed_segments_successor_is_named_on_disk_before_its_footer(tmp_path: Path) -> None:
    """A footer says a segment follows; under never too, that segment's name is made durable
    first (recovery refuses a sealed last segment as damage: the campaign found a server under
    never that would not start after a power cut without a repair)."""
    fs = _DirSyncs()
    d = str(tmp_path / "log")
    with Log.open(d, segment_size=4096, durability="never", fs=fs) as log:
        log.append_many([b"x" * 1000] * 8)
    made = [path for op, path in fs.calls if op == "replace" and path.endswith(".log.tmp")]
    first, second = made[0], made[1]
    after = fs.calls[fs.calls.index(("replace", second)) + 1 :]
    footer = after.index(("fdatasync", first))  # the first segment's footer (its fd: opened as .tmp)
    assert ("fsync_dir", os.path.abspath(d)) in after[:footer]
