"""A real etcd (Debian's) per test for the automatic-failover tests (``tests/etcdserver.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from etcdserver import EtcdProcess, start_etcd


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    server = start_etcd(tmp_path / "etcd")
    try:
        yield server
    finally:
        server.stop()
