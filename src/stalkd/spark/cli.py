"""``stalkd analyze`` and ``stalkd bench``: the Spark pipeline's command-line entry points.

Example::

    $ stalkd analyze data --out analysis --window 60      # a server's data directory (-b data)
    $ stalkd analyze s3://bucket/queue --master spark://host:7077
    $ stalkd bench history --dir /tmp/hist --jobs 100000
"""

from __future__ import annotations

import argparse
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path


def analyze(argv: Sequence[str]) -> int:
    """Run the analytics over a WAL directory and print the summary; returns an exit code."""
    p = argparse.ArgumentParser(prog="stalkd analyze",
                                description="Spark analytics over a stalkd WAL (live segments and archive).")
    p.add_argument("dir", metavar="LOG",
                   help="what to read: the server's data directory (-b DIR; its wal/ is read), a log "
                        "directory, or an archive URL written by `stalkd serve --archive URL` "
                        "(s3://BUCKET/PREFIX, gs://..., hdfs://..., or a local archive directory)")
    p.add_argument("--out", default="analysis", help="output directory (Parquet tables, plots, report.html)")
    p.add_argument("--master", default=None,
                   help="Spark master URL (default: local[*], or what spark-submit set)")
    p.add_argument("--window", type=float, default=60.0, help="window size in seconds (default 60)")
    p.add_argument("--archive", choices=("true", "false", "only"), default="true",
                   help="read the archive too (true), not at all (false), or only it")
    p.add_argument("--all", action="store_true",
                   help="show stalkd's internal tubes (stalkd.failed, stalkd.key.*, ...) in the report "
                        "and summary too (the tables always hold them)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(list(argv))
    from stalkd.log.errors import LogError
    from stalkd.spark.locations import is_archive, resolve

    try:
        source = resolve(args.dir)
        if is_archive(source):
            from stalkd.archive.remote import load_manifest
            from stalkd.archive.store import Store

            load_manifest(Store.open(source))  # an archive URL without a manifest: say so now
    except (LogError, OSError, ValueError) as exc:
        print(f"stalkd analyze: {exc}", file=sys.stderr)
        return 2
    if args.window <= 0:
        print(f"stalkd analyze: --window must be positive, got {args.window}", file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    from stalkd.spark.pipeline import NothingToAnalyzeError, run_analysis
    from stalkd.spark.session import build_session

    # Inside a program that already has a session (a notebook, a test): use it, leave it running.
    existing = SparkSession.getActiveSession()
    spark = existing or build_session(args.master or "local[*]", app="stalkd-analyze")
    try:
        try:
            result = run_analysis(spark, source, args.out, window_seconds=args.window, archive=args.archive,
                                  progress=not args.no_progress and sys.stderr.isatty(),
                                  internal=args.all)
        except NothingToAnalyzeError as exc:
            print(f"stalkd analyze: {exc}", file=sys.stderr)
            return 2
    finally:
        if existing is None:
            spark.stop()
    print(result.summary)
    print(f"\n{result.jobs:,} jobs; tables and plots in {result.out_dir}/; report: {result.report} "
          f"({result.seconds:.1f} s)")
    return 0


BENCHES = {
    "history": "bench/history.py",
    "spark": "bench/spark_bench.py",
}


def bench(argv: Sequence[str]) -> int:
    """``stalkd bench NAME [ARGS]``: run a bench script of a source checkout."""
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHES:
        print("usage: stalkd bench {" + ",".join(BENCHES) + "} [ARGS...]", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    root = Path(__file__).resolve().parents[3]
    script = root / BENCHES[argv[0]]
    if not script.exists():
        print(f"stalkd bench: {script} not found (bench scripts live in a source checkout)", file=sys.stderr)
        return 2
    sys.argv = [str(script), *argv[1:]]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0
