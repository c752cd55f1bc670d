"""Building a SparkSession that behaves the same on a laptop, in CI and on a cluster.

Ensures: Python workers run this interpreter (so they can import ``stalkd``) and, with a
pip-installed pyspark, import its compiled modules rather than the sources zip (see
``sparkhome``), the JVM logs errors only, timestamps are shown in UTC, and Python filter
pushdown is enabled so the ``stalkd`` source can prune segments by offset.

Example::

    >>> spark = build_session("local[2]", app="stalkd-analyze")   # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from stalkd.spark.sparkhome import use_lean_spark_home

QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def session_conf(*, tests: bool = False) -> dict[str, str]:
    """Spark settings stalkd uses; ``tests`` trades JIT throughput for a faster start."""
    java_opts = f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J}"
    if tests:
        # C1 only: the JVM starts sooner and runs slower; never for benchmarks.
        java_opts += " -XX:TieredStopAtLevel=1"
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2" if tests else "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.pyspark.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    }


def build_session(master: str | None = "local[2]", *, app: str = "stalkd", tests: bool = False,
                  extra: dict[str, str] | None = None) -> Any:
    """A SparkSession for ``master`` (None keeps whatever spark-submit chose) with stalkd's settings.

    Registers the ``stalkd`` data source explicitly as well, so it works even where the
    ``pyspark_stalkd`` auto-registration module is not on the workers' path.
    """
    # Workers must run this interpreter, or they cannot import stalkd (Spark starts its
    # Python workers with PYSPARK_PYTHON, not the driver's interpreter).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark
    from pyspark.sql import SparkSession

    # Before the JVM starts: it and the Python workers it starts take SPARK_HOME from here.
    use_lean_spark_home(Path(pyspark.__file__).parent)

    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    conf = session_conf(tests=tests)
    # Executors read archive URLs with the same S3 settings as the driver (stalkd.archive.store);
    # Spark redacts *SECRET* values in its UI and logs.
    for key in AWS_VARIABLES:
        if os.environ.get(key):
            conf[f"spark.executorEnv.{key}"] = os.environ[key]
    if tests:
        conf["spark.default.parallelism"] = "2"
        conf["spark.driver.memory"] = "1g"
    conf.update(extra or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from stalkd.spark.source import StalkdDataSource

    spark.dataSource.register(StalkdDataSource)
    return spark
