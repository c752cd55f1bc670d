"""Python workers import the compiled, installed pyspark, not the sources-only zip under
SPARK_HOME (stalkd.spark.sparkhome: compiling it made workers miss Spark's fixed 10 s to
connect back on a loaded machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support import require_binary

pytestmark = pytest.mark.spark

USER_SESSION = """
import json, os
import pyspark
from stalkd.spark.session import build_session
spark = build_session("local[1]", app="stalkd-user", tests=True)
seen = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
print(json.dumps({"seen": seen, "installed": pyspark.__file__, "home": os.environ.get("SPARK_HOME")}))
spark.stop()
"""


def test_python_workers_import_the_installed_pyspark(spark: Any) -> None:
    import pyspark

    seen = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
    assert seen == [pyspark.__file__]


def test_a_users_session_without_spark_home_gets_workers_importing_the_installed_pyspark(
        tmp_path: Path) -> None:
    # Given a user's process with no SPARK_HOME (the test session's own is not inherited)
    require_binary("java")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    # When it builds its session and runs a Python task
    out = subprocess.run([sys.executable, "-c", USER_SESSION], env=env, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # Then the worker imported the installed pyspark, through a SPARK_HOME in the user's cache
    assert got["seen"] == [got["installed"]], got
    assert got["home"] is not None and Path(got["home"]).parent == tmp_path / "cache" / "stalkd"
