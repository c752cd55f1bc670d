"""The stalkd server both recipes' example projects talk to."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from support import ServerProcess, spawn_serving


@pytest.fixture
def stalkd() -> Iterator[ServerProcess]:
    s = spawn_serving([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", "0"],
                      what="stalkd", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield s
    finally:
        s.stop()
