"""One real local[2] SparkSession per test process, shared by every Spark test.

A session costs ~10 s to start and its JVM lives until the process exits, so starting more than
one would only slow the suite down.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import ServerProcess, require_binary, spawn_serving

pyspark = pytest.importorskip("pyspark", reason="the [spark] extra is not installed")


@pytest.fixture(scope="session")
def spark_home(tmp_path_factory: Any) -> Iterator[Path]:
    """The SPARK_HOME ``build_session`` gives a pip-installed pyspark (stalkd.spark.sparkhome:
    pyspark's own without its sources-only ``python/lib/pyspark.zip``, which every Python
    worker compiled, missing Spark's fixed 10 s to connect back on a loaded machine), made in a
    temporary directory rather than the user's cache, and set before any JVM starts (the
    standalone cluster's too)."""
    from stalkd.spark.sparkhome import use_lean_spark_home

    saved = os.environ.pop("SPARK_HOME", None)
    home = use_lean_spark_home(Path(pyspark.__file__).parent, cache=tmp_path_factory.mktemp("cache"))
    assert home is not None, "pip's pyspark ships python/lib/pyspark.zip"
    try:
        yield Path(home)
    finally:
        if saved is None:
            os.environ.pop("SPARK_HOME", None)
        else:
            os.environ["SPARK_HOME"] = saved


@pytest.fixture(scope="session")
def spark(s3_server: Any, spark_home: Path) -> Iterator[Any]:
    # After s3_server: the JVM and its Python workers inherit the AWS variables pointing at it.
    require_binary("java")
    from stalkd.spark.session import build_session

    session = build_session("local[2]", app="stalkd-tests", tests=True)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(params=["beanstalkd", "stalkd"])
def queue_server(request: Any, tmp_path: Path) -> Iterator[ServerProcess]:
    """Debian's beanstalkd, then stalkd's own server (in memory), each on port 0, once it answers;
    stalkd's output goes to ``stalkd.log`` in the test's tmp dir (shown if it does not come up)."""
    if request.param == "beanstalkd":
        server = request.getfixturevalue("beanstalkd")
        yield server
        return
    own = spawn_serving([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", "0"],
                        what="stalkd", log=tmp_path / "stalkd.log")
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: Any) -> Iterator[Any]:
    """moto's S3 API server on 127.0.0.1 (port 0, read from its log); the AWS variables pointing
    at it are set for this process and everything it starts (servers, Spark workers, drivers)."""
    from cluster import start_s3

    server = start_s3(tmp_path_factory.mktemp("s3"))
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    try:
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: Any, s3_server: Any, spark_home: Path) -> Iterator[Any]:
    """A standalone master and two one-core workers (separate JVMs) on loopback."""
    require_binary("java")
    from cluster import start_spark_cluster

    cluster = start_spark_cluster(tmp_path_factory.mktemp("spark-cluster"), workers=2)
    try:
        yield cluster
    finally:
        cluster.stop()



@pytest.fixture(scope="session")
def cluster_driver(spark_cluster: Any, tmp_path_factory: Any) -> Iterator[Any]:
    """One driver application on ``spark_cluster`` (executors on both workers), shared by the
    cluster tests: starting a driver and its executors costs more than most requests to it. It
    holds both workers' cores until the session ends, so another application on this cluster
    would wait for them: cluster tests go through this driver."""
    from cluster import ClusterDriver

    driver = ClusterDriver(spark_cluster.url, tmp_path_factory.mktemp("driver") / "driver.log")
    try:
        yield driver
    finally:
        driver.stop()
