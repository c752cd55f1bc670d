"""``stalkd analyze``'s job: read a WAL with Spark, write the three tables, render the report.

Ensures: the output directory holds ``jobs/``, ``windows/``, ``tubes/`` (Parquet, replaced on
each run), the PNG plots, ``report.html`` and ``summary.txt`` only when every step succeeded;
a failed step raises and leaves the previous report (if any) untouched.

Example::

    >>> result = run_analysis(spark, "data/wal", "analysis", window_seconds=60)  # doctest: +SKIP
    >>> print(result.summary)                                                    # doctest: +SKIP
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stalkd.spark.analytics import analyze_records
from stalkd.spark.report import utc, write_report

STEPS = ("read records", "jobs table", "windows table", "tubes table", "report")


@dataclass(frozen=True)
class AnalysisResult:
    """What a run produced."""

    out_dir: Path
    records: int
    jobs: int
    report: Path
    summary: str
    seconds: float


@contextmanager
def _progress(spark: Any, enabled: bool) -> Iterator[Any]:
    """A tqdm bar over the steps; a poller shows the running Spark stage's task counts."""
    from tqdm import tqdm

    bar = tqdm(total=len(STEPS), disable=not enabled, unit="step", dynamic_ncols=True,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}] {postfix}")  # fmt: skip
    stop = threading.Event()

    def poll() -> None:
        tracker = spark.sparkContext.statusTracker()
        while not stop.wait(0.5):
            tasks = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            done = sum(t.numCompletedTasks for t in tasks if t)
            total = sum(t.numTasks for t in tasks if t)
            bar.set_postfix_str(f"tasks {done}/{total}" if total else "", refresh=True)

    poller = threading.Thread(target=poll, name="stalkd-progress", daemon=True)
    if enabled:
        poller.start()
    try:
        yield bar
    finally:
        stop.set()
        if enabled:
            poller.join()
        bar.close()


def _step(bar: Any, name: str) -> None:
    bar.set_description(name)


class _LocalTables:
    """Tables written by Spark's Parquet writer into the local work directory."""

    def __init__(self, work: Path) -> None:
        self.work = work

    def write(self, df: Any, name: str) -> Any:
        """Write ``df`` as table ``name``; returns the table read back (as the report's source)."""
        df.write.mode("overwrite").parquet(str(self.work / name))
        return df.sparkSession.read.parquet(str(self.work / name))


class _StoreTables:
    """Tables written to a URL by the executors themselves, one Parquet object per partition
    through ``pyarrow.fs`` (Spark's own writer would need the hadoop-aws jars; ``mapInArrow``
    would need pandas)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def write(self, df: Any, name: str) -> Any:
        from pyspark.sql.pandas.types import to_arrow_schema  # pyarrow only, no pandas
        from pyspark.sql.types import TimestampType

        from stalkd.archive.store import Store

        store = Store.open(self.url)
        target = store.path(name)
        store.fs.create_dir(target, recursive=True)
        store.fs.delete_dir_contents(target, missing_dir_ok=True)
        url = self.url
        schema = to_arrow_schema(df.schema, timezone="UTC")
        stamps = [f.name for f in df.schema.fields if isinstance(f.dataType, TimestampType)]

        def write_part(index: int, rows: Iterator[Any]) -> Iterator[int]:

            import pyarrow as pa
            import pyarrow.parquet as pq

            from stalkd.archive.store import Store

            dicts = [r.asDict() for r in rows]
            if not dicts:  # an empty partition writes no object
                return iter([0])
            for d in dicts:
                for k in stamps:  # PySpark hands timestamps over as naive local times
                    if d[k] is not None:
                        d[k] = d[k].astimezone(UTC)
            sink = pa.BufferOutputStream()
            pq.write_table(pa.Table.from_pylist(dicts, schema=schema), sink)
            Store.open(url).put_atomic(f"{name}/part-{index:05d}.parquet", sink.getvalue())
            return iter([len(dicts)])

        df.rdd.mapPartitionsWithIndex(write_part).sum()
        return df


def run_analysis(spark: Any, log_dir: str, out_dir: str | Path, *, window_seconds: float = 60.0,
                 archive: str = "true", progress: bool = True, internal: bool = False) -> AnalysisResult:
    """Run the whole analysis over ``log_dir`` (live segments and, by default, the archive).

    The tables hold every tube; the report and summary leave stalkd's internal tubes
    (``stalkd.*``) out unless ``internal``.

    ``out_dir`` may be a URL (``s3://...``): the tables are written there by the executors, the
    plots and report rendered locally and uploaded (objects replaced, not swapped in at once).
    """
    from stalkd.archive.store import is_url

    started = time.monotonic()
    if is_url(str(out_dir)):
        import tempfile

        local = Path(tempfile.mkdtemp(prefix="stalkd-analyze-"))
        try:
            res = _run(spark, log_dir, local / "out", local / "out.partial", window_seconds, archive,
                       progress, started, _StoreTables(str(out_dir)), internal=internal)
            _upload(local / "out", str(out_dir))
        finally:
            shutil.rmtree(local, ignore_errors=True)
        return AnalysisResult(Path(str(out_dir)), res.records, res.jobs, Path(f"{out_dir}/{res.report.name}"),
                              res.summary, time.monotonic() - started)
    out = Path(out_dir)
    work = out.with_name(out.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        return _run(spark, log_dir, out, work, window_seconds, archive, progress, started, _LocalTables(work),
                    internal=internal)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _upload(local: Path, url: str) -> None:
    from stalkd.archive.store import Store

    store = Store.open(url)
    for f in sorted(local.iterdir()):
        if f.is_file():
            store.put_atomic(f.name, f.read_bytes())


def _run(spark: Any, log_dir: str, out: Path, work: Path, window_seconds: float, archive: str,
         progress: bool, started: float, sink: Any, *, internal: bool = False) -> AnalysisResult:
    work.mkdir(parents=True, exist_ok=True)
    with _progress(spark, progress) as bar:
        _step(bar, STEPS[0])
        records = (spark.read.format("stalkd").option("records", "wal").option("archive", archive)
                   .load(log_dir).drop("body").persist())  # fmt: skip
        try:
            n_records = records.count()
            if n_records == 0:
                # A report of nothing (time axes at 1970) would pass for an idle queue.
                raise NothingToAnalyzeError(f"{log_dir}: the log holds no records to analyze")
            bar.update()
            tables = analyze_records(records, window_seconds=window_seconds, cache=True)
            try:
                _step(bar, STEPS[1])
                sink.write(tables.jobs, "jobs")
                bar.update()
                _step(bar, STEPS[2])
                windows = [r.asDict() for r in sink.write(tables.windows, "windows").collect()]
                bar.update()
                _step(bar, STEPS[3])
                tubes = [r.asDict() for r in sink.write(tables.tubes, "tubes").orderBy("tube").collect()]
                bar.update()
                n_jobs = sum(int(t["jobs"] or 0) for t in tubes)
            finally:
                tables.release()
        finally:
            records.unpersist()
        _step(bar, STEPS[4])
        span = _span(windows, window_seconds)
        report, summary = write_report(work, windows, tubes, source=str(log_dir), records=n_records,
                                       span=span, window_seconds=window_seconds, internal=internal)
        bar.update()
    # Swap the finished run in: a crash before this point leaves the previous report intact.
    if out.exists():
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        work.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        work.rename(out)
    return AnalysisResult(out, n_records, n_jobs, out / report.name, summary, time.monotonic() - started)


class NothingToAnalyzeError(ValueError):
    """The log read holds no records: no report is written (names the log)."""


def _span(windows: list[dict[str, Any]], window_seconds: float) -> str:
    if not windows:
        return "empty"
    lo: datetime = utc(min(w["window_start"] for w in windows))
    hi: datetime = utc(max(w["window_start"] for w in windows))
    return f"{lo:%Y-%m-%d %H:%M:%S} to {hi:%Y-%m-%d %H:%M:%S} UTC (+{window_seconds:g} s)"
