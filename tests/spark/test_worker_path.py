"""The Python workers of the test session import the compiled, installed pyspark, not the
sources-only zip under SPARK_HOME (see conftest.spark_home: compiling it made workers miss
Spark's fixed 10 s to connect back on a loaded machine)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.spark


def test_python_workers_import_the_installed_pyspark(spark: Any) -> None:
    import pyspark

    seen = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
    assert seen == [pyspark.__file__]
