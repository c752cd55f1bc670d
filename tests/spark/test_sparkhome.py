"""The SPARK_HOME build_session gives a pip-installed pyspark (stalkd.spark.sparkhome), on small
stand-ins for a pyspark package (real directories and files; no Spark started)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from stalkd.spark.sparkhome import SOURCES_ZIP, cache_dir, lean_spark_home, use_lean_spark_home


def _pip_pyspark(root: Path, *, with_zip: bool = True) -> Path:
    pkg = root / "site-packages" / "pyspark"
    (pkg / "jars").mkdir(parents=True)
    (pkg / "jars" / "spark-core.jar").write_bytes(b"jar")
    (pkg / "bin").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "python" / "lib").mkdir(parents=True)
    if with_zip:
        (pkg / "python" / "lib" / "pyspark.zip").write_bytes(b"sources")
    return pkg


def test_the_home_is_pysparks_own_without_the_python_directory_and_made_once(tmp_path: Path) -> None:
    pkg = _pip_pyspark(tmp_path)
    cache = tmp_path / "cache" / "stalkd"
    home = lean_spark_home(pkg, cache)
    assert home is not None and home.parent == cache
    # Then everything but python/ is there, as links to pyspark's own
    assert sorted(p.name for p in home.iterdir()) == ["__init__.py", "bin", "jars"]
    assert (home / "jars" / "spark-core.jar").read_bytes() == b"jar"
    assert not (home / SOURCES_ZIP).exists()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    # And a second session reuses it, leaving nothing else behind
    (home / "marker").write_text("")
    assert lean_spark_home(pkg, cache) == home
    assert (home / "marker").exists()
    assert list(cache.iterdir()) == [home]


def test_a_changed_pyspark_gets_a_home_of_its_own(tmp_path: Path) -> None:
    pkg = _pip_pyspark(tmp_path)
    cache = tmp_path / "cache"
    first = lean_spark_home(pkg, cache)
    (pkg / "sbin").mkdir()  # an upgrade that ships one more directory
    second = lean_spark_home(pkg, cache)
    assert second is not None and second != first
    assert (second / "sbin").is_dir()


def test_a_pyspark_without_the_sources_zip_keeps_its_spark_home(tmp_path: Path) -> None:
    pkg = _pip_pyspark(tmp_path, with_zip=False)  # e.g. a Spark distribution's python/pyspark
    env: dict[str, str] = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert use_lean_spark_home(pkg, env) is None
    assert "SPARK_HOME" not in env
    assert not (tmp_path / "cache").exists()


def test_spark_home_is_set_in_the_users_cache_unless_already_set(tmp_path: Path) -> None:
    pkg = _pip_pyspark(tmp_path)
    env: dict[str, str] = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert cache_dir(env) == tmp_path / "xdg" / "stalkd"
    home = use_lean_spark_home(pkg, env)
    assert home is not None and env["SPARK_HOME"] == home
    assert Path(home).parent == tmp_path / "xdg" / "stalkd"
    mine = {"SPARK_HOME": "/opt/spark", "XDG_CACHE_HOME": str(tmp_path / "other")}
    assert use_lean_spark_home(pkg, mine) == "/opt/spark"
    assert mine["SPARK_HOME"] == "/opt/spark" and not (tmp_path / "other").exists()


def test_an_unwritable_cache_leaves_spark_home_unset(tmp_path: Path) -> None:
    pkg = _pip_pyspark(tmp_path)
    blocked = tmp_path / "file"
    blocked.write_text("")  # the cache's parent is a file: nothing can be made under it
    env: dict[str, str] = {"XDG_CACHE_HOME": str(blocked)}
    assert use_lean_spark_home(pkg, env) is None
    assert "SPARK_HOME" not in env
    assert os.path.isfile(blocked)
