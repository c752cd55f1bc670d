"""What the campaign's tests share: the power-loss file system's mount, where it can be made."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the campaign package; after the rest

from campaign.powerfs import why_no_mount  # noqa: E402


@pytest.fixture
def fuse() -> None:
    """Skips a test that needs a powerfs mount where FUSE cannot mount, saying why."""
    why = why_no_mount()
    if why is not None:
        pytest.skip(why)
