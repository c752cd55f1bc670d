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
from datetime import datetime
from pathlib import Path
from typing import Any

from stalkd.spark.analytics import analyze_records
from stalkd.spark.report import summary_text, utc, write_html, write_plots

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


def _write(df: Any, path: Path) -> None:
    df.write.mode("overwrite").parquet(str(path))


def run_analysis(spark: Any, log_dir: str, out_dir: str | Path, *, window_seconds: float = 60.0,
                 archive: str = "true", progress: bool = True) -> AnalysisResult:
    """Run the whole analysis over ``log_dir`` (live segments and, by default, the archive)."""
    started = time.monotonic()
    out = Path(out_dir)
    work = out.with_name(out.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        return _run(spark, log_dir, out, work, window_seconds, archive, progress, started)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _run(spark: Any, log_dir: str, out: Path, work: Path, window_seconds: float, archive: str,
         progress: bool, started: float) -> AnalysisResult:
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
                _write(tables.jobs, work / "jobs")
                bar.update()
                _step(bar, STEPS[2])
                _write(tables.windows, work / "windows")
                windows = [r.asDict() for r in spark.read.parquet(str(work / "windows")).collect()]
                bar.update()
                _step(bar, STEPS[3])
                _write(tables.tubes, work / "tubes")
                tubes = [r.asDict() for r in spark.read.parquet(str(work / "tubes")).orderBy("tube").collect()]
                bar.update()
                n_jobs = sum(int(t["jobs"] or 0) for t in tubes)
            finally:
                tables.release()
        finally:
            records.unpersist()
        _step(bar, STEPS[4])
        span = _span(windows, window_seconds)
        write_plots(windows, tubes, work, window_seconds)
        report = write_html(work, tubes, source=str(log_dir), records=n_records, span=span,
                            window_seconds=window_seconds)  # fmt: skip
        summary = summary_text(tubes, records=n_records, span=span)
        (work / "summary.txt").write_text(summary + "\n", encoding="utf-8")
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
