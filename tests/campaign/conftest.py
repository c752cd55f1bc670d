"""What the campaign's tests share: the power-loss file system's mount, where it can be made."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the campaign package; after the rest

from campaign.powerfs import PowerFS, why_no_mount  # noqa: E402


@pytest.fixture
def fuse() -> None:
    """Skips a test that needs a powerfs mount where FUSE cannot mount, saying why."""
    why = why_no_mount()
    if why is not None:
        pytest.skip(why)


def _mount(tmp_path: Path, strict: bool) -> Iterator[PowerFS]:
    why = why_no_mount()
    if why is not None:
        pytest.skip(why)
    fs = PowerFS(str(tmp_path / "backing"), str(tmp_path / "mnt"), strict=strict)
    fs.start()
    try:
        yield fs
    finally:
        fs.kill()


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[PowerFS]:
    """A powerfs mount (its ``mountpoint``) where an entry is durable once its directory is fsynced."""
    yield from _mount(tmp_path, strict=True)


@pytest.fixture
def lenient(tmp_path: Path) -> Iterator[PowerFS]:
    """A powerfs mount where entries are durable at once and only data waits for fsync (ext4-like)."""
    yield from _mount(tmp_path, strict=False)
