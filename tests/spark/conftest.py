"""One real local[2] SparkSession per test process (SPARK-NOTES §2), shared by every Spark test.

A session costs ~10 s to start and its JVM lives until the process exits, so starting more than
one would only slow the suite down.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from support import ServerProcess, require_binary, spawn_server

pyspark = pytest.importorskip("pyspark", reason="the [spark] extra is not installed")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require_binary("java")
    from stalkd.spark.session import build_session

    session = build_session("local[2]", app="stalkd-tests", tests=True)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(params=["beanstalkd", "stalkd"])
def queue_server(request: Any) -> Iterator[ServerProcess]:
    """Debian's beanstalkd, then stalkd's own server (in memory), each on port 0."""
    if request.param == "beanstalkd":
        server = request.getfixturevalue("beanstalkd")
        yield server
        return
    own = spawn_server([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", "0"],
                       what="stalkd", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield own
    finally:
        own.stop()
