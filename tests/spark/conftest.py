"""One real local[2] SparkSession per test process (SPARK-NOTES §2), shared by every Spark test.

A session costs ~10 s to start and its JVM lives until the process exits, so starting more than
one would only slow the suite down.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="the [spark] extra is not installed")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None:
        msg = "java is not installed (scripts/system-deps.sh installs openjdk-17-jre-headless)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    from stalkd.spark.session import build_session

    session = build_session("local[2]", app="stalkd-tests", tests=True)
    try:
        yield session
    finally:
        session.stop()
