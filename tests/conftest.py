"""Root fixtures. Helpers live in ``tests/support.py`` (import them with ``from support import``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support import ServerProcess, start_beanstalkd


@pytest.fixture
def beanstalkd() -> Iterator[ServerProcess]:
    """A fresh in-memory Debian beanstalkd for one test."""
    server = start_beanstalkd()
    try:
        yield server
    finally:
        server.stop()
