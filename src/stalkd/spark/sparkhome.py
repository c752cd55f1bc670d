"""The SPARK_HOME that a pip-installed pyspark's Python workers start quickly from.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path, and a
pip-installed pyspark is its own SPARK_HOME, whose zip holds sources only: each worker compiles
pyspark before it can do anything (three to four times the CPU of importing the installed,
compiled pyspark). The workers Spark starts outside its forking daemon (a Python data source's
planning, the streaming source runner) must connect back to the JVM within a fixed 10 s
(PythonWorkerFactory, not a setting): on a loaded machine the compiling pushes them past it,
and the query fails with "Python worker failed to connect back".

A SPARK_HOME that is pyspark's own without ``python/`` (symbolic links to the rest: ``bin``,
``jars``...) leaves the workers importing the pyspark installed for the interpreter they run
(``spark.pyspark.python``, the driver's), the very same version.

Ensures: a SPARK_HOME set by the user (or by spark-submit) is left alone, and so is a pyspark
that does not ship the zip (a Spark distribution's own); the directory is made once per pyspark
installation, in the user's cache directory (0700), and appears whole or not at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

__all__ = ["cache_dir", "lean_spark_home", "use_lean_spark_home"]

SOURCES_ZIP = Path("python", "lib", "pyspark.zip")


def cache_dir(environ: MutableMapping[str, str] = os.environ) -> Path:
    """Where stalkd keeps what it can rebuild: ``$XDG_CACHE_HOME/stalkd`` (``~/.cache/stalkd``)."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "stalkd")


def lean_spark_home(pyspark_dir: Path, cache: Path) -> Path | None:
    """A SPARK_HOME under ``cache`` mirroring ``pyspark_dir`` (an installed pyspark package)
    without its ``python`` directory; None if that pyspark has no sources zip to avoid.

    Its name depends on the pyspark directory and what it holds, so an upgraded pyspark gets a
    new one; an existing one is complete (each is renamed into place once built)."""
    if not (pyspark_dir / SOURCES_ZIP).is_file():
        return None
    real = pyspark_dir.resolve()
    names = sorted(e.name for e in real.iterdir() if e.name != "python")
    key = hashlib.sha256("\0".join([str(real), *names]).encode()).hexdigest()[:16]
    home = cache / f"spark-home-{key}"
    if home.is_dir():
        return home
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".spark-home-", dir=cache))
    try:
        for name in names:
            (building / name).symlink_to(real / name)
        try:
            building.rename(home)
        except OSError:
            if not home.is_dir():  # not another process's copy, renamed first: a real error
                raise
    finally:
        if building.exists():
            shutil.rmtree(building, ignore_errors=True)
    return home


def use_lean_spark_home(pyspark_dir: Path, environ: MutableMapping[str, str] = os.environ,
                        cache: Path | None = None) -> str | None:
    """Point ``SPARK_HOME`` in ``environ`` at :func:`lean_spark_home` unless it is set already;
    the SPARK_HOME in effect. Where the cache cannot be written, Spark keeps its own (slower to
    start workers from, but working)."""
    if environ.get("SPARK_HOME"):
        return environ["SPARK_HOME"]
    home = None
    with contextlib.suppress(OSError):
        home = lean_spark_home(pyspark_dir, cache_dir(environ) if cache is None else cache)
    if home is None:
        return None
    environ["SPARK_HOME"] = str(home)
    return str(home)
