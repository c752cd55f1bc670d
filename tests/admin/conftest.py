"""Fixtures shared by the admin tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from admin.adminproc import AdminServer, start_admin_server


@pytest.fixture
def server(tmp_path: os.PathLike[str]) -> Iterator[AdminServer]:
    """A real ``stalkd serve --admin`` on port 0 with its data under ``tmp_path``, stopped after the test."""
    srv = start_admin_server("--dir", os.path.join(str(tmp_path), "data"))
    try:
        yield srv
    finally:
        srv.stop()
