"""Job analytics over decoded WAL records: each job's life, and per tube and time window figures.

Input is a DataFrame in ``WAL_SCHEMA`` (``spark.read.format("stalkd").option("records",
"wal").load(dir)``). Three tables come out:

* ``jobs``: one row per job: tube, put time, priority, counts of reserves / releases /
  timeouts / buries / kicks, first queue wait, total run time, last op and final state.
* ``windows``: one row per (tube, window start): puts, reserves, deletes, releases, buries,
  kicks, timeouts, queue wait and run time p50 / p90 / p99 (seconds), retry and bury rates,
  and the backlog (jobs put and not yet deleted) at the end of the window.
* ``tubes``: the same counts and percentiles per tube over the whole history.

Definitions (the tests compute these independently):
  * A job's events are ordered by ``seq``. ``touch``, ``pause`` and ``job`` records do not
    take part in the ordering: a ``job`` record restates state (snapshot, compaction) and only
    supplies the tube and put time of a job whose ``put`` is no longer in the log.
  * Queue wait of a reserve = reserve time - the moment the job last became ready: the put
    (or its delay deadline), a release (or its deadline), a kick, or a TTR timeout. A reserve
    that directly follows another reserve (a reservation lost in a crash) has no wait.
  * Run time = the time from a reserve to the delete, release, bury or timeout ending it.
  * Percentiles are exact, with linear interpolation between closest ranks.
  * Retry rate = (releases + timeouts) / reserves; bury rate = buries / reserves.
  * Backlog at a window's end counts jobs put before the end and not deleted by then.

Ensures: every event is counted in exactly one window of its job's tube; events of a job whose
tube is unknown (its ``put`` was deleted by retention and no ``job`` record restates it) are
counted under the tube ``"?"``, never dropped.

Example::

    >>> tables = analyze_records(spark.read.format("stalkd").option("records", "wal")
    ...                          .load("data/wal"), window_seconds=60)       # doctest: +SKIP
    >>> tables.windows.orderBy("window_start").show()                       # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

UNKNOWN_TUBE = "?"
PERCENTILES = (0.5, 0.9, 0.99)
# Ops that move a job through its life; the order of these per job defines waits and runs.
_LIFE_OPS = ("put", "reserve", "release", "bury", "kick", "timeout", "delete")
_READY_OPS = ("put", "release", "kick", "timeout")
_END_OPS = ("delete", "release", "bury", "timeout")
_COUNTED = ("put", "reserve", "delete", "release", "bury", "kick", "timeout")
# Column name of each op's count.
PLURAL = {"put": "puts", "reserve": "reserves", "delete": "deletes", "release": "releases",
          "bury": "buries", "kick": "kicks", "timeout": "timeouts"}
_US = 1_000_000.0


@dataclass(frozen=True)
class Tables:
    """The analytics result; DataFrames are lazy until written or collected."""

    jobs: DataFrame
    windows: DataFrame
    tubes: DataFrame
    cached: tuple[DataFrame, ...] = ()

    def release(self) -> None:
        """Drop the intermediates ``analyze_records(cache=True)`` kept in memory."""
        for df in self.cached:
            df.unpersist()


def _micros(col: str) -> Column:
    return F.unix_micros(F.col(col))


def job_events(records: DataFrame) -> DataFrame:
    """Lifecycle events with ``wait_s`` on reserves and ``run_s`` on the ops ending a reservation."""
    ev = records.where(F.col("op").isin(*_LIFE_OPS)).select(
        "job_id", "seq", "offset", "op",
        _micros("time").alias("t_us"),
        _micros("deadline").alias("deadline_us"),
    )  # fmt: skip
    # When the job became ready through this event (None if it did not).
    ready = (
        F.when(F.col("op").isin("put", "release"),
               F.greatest(F.col("t_us"), F.coalesce(F.col("deadline_us"), F.col("t_us"))))
        .when(F.col("op").isin("kick", "timeout"), F.col("t_us"))
    )  # fmt: skip
    w = Window.partitionBy("job_id").orderBy("seq", "offset")
    ev = ev.withColumn("ready_us", ready)
    ev = (
        ev.withColumn("prev_op", F.lag("op").over(w))
        .withColumn("prev_t_us", F.lag("t_us").over(w))
        .withColumn("prev_ready_us", F.lag("ready_us").over(w))
    )
    wait = F.when((F.col("op") == "reserve") & F.col("prev_op").isin(*_READY_OPS),
                  (F.col("t_us") - F.col("prev_ready_us")) / _US)  # fmt: skip
    run = F.when(F.col("op").isin(*_END_OPS) & (F.col("prev_op") == "reserve"),
                 (F.col("t_us") - F.col("prev_t_us")) / _US)  # fmt: skip
    return ev.withColumn("wait_s", wait).withColumn("run_s", run).drop("prev_ready_us")


def _job_attributes(records: DataFrame) -> DataFrame:
    """Tube, put time, priority, delay, ttr and body size per job, from its put or job record."""
    src = records.where(F.col("op").isin("put", "job")).select(
        "job_id", "tube", "priority", "delay", "ttr", "body_size",
        F.coalesce(_micros("created"), _micros("time")).alias("put_us"),
        # a put wins over restatements; among restatements the earliest wins
        F.when(F.col("op") == "put", F.lit(0)).otherwise(F.lit(1)).alias("rank"),
        "seq",
    )  # fmt: skip
    best = F.struct("rank", "seq", "tube", "priority", "delay", "ttr", "body_size", "put_us")
    return src.groupBy("job_id").agg(F.min(best).alias("a")).select("job_id", "a.*").drop("rank", "seq")


def _count(op: str) -> Column:
    return F.sum(F.when(F.col("op") == op, 1).otherwise(0)).cast("long")


def _state(last_op: Column) -> Column:
    return (
        F.when(last_op == "delete", "deleted")
        .when(last_op == "bury", "buried")
        .when(last_op == "reserve", "reserved")
        .otherwise("ready")
    )


def jobs_table(records: DataFrame, events: DataFrame) -> DataFrame:
    """One row per job seen in the records (see the module docstring for the columns)."""
    per_job = events.groupBy("job_id").agg(
        *(_count(op).alias(PLURAL[op]) for op in _COUNTED),
        F.min(F.when(F.col("op") == "reserve", F.col("t_us"))).alias("first_reserve_us"),
        F.max(F.when(F.col("op") == "delete", F.col("t_us"))).alias("deleted_us"),
        F.min_by("wait_s", F.when(F.col("op") == "reserve", F.col("seq"))).alias("first_wait_s"),
        F.sum("wait_s").alias("total_wait_s"),
        F.sum("run_s").alias("total_run_s"),
        F.max_by("op", "seq").alias("last_op"),
    )
    attrs = _job_attributes(records)
    jobs = per_job.join(attrs, "job_id", "full_outer")
    return jobs.select(
        "job_id",
        F.coalesce(F.col("tube"), F.lit(UNKNOWN_TUBE)).alias("tube"),
        F.timestamp_micros("put_us").alias("put_time"),
        "priority", "delay", "ttr", "body_size",
        *(F.coalesce(F.col(PLURAL[op]), F.lit(0)).alias(PLURAL[op]) for op in _COUNTED if op != "put"),
        F.timestamp_micros("first_reserve_us").alias("first_reserve_time"),
        F.timestamp_micros("deleted_us").alias("delete_time"),
        "first_wait_s", "total_wait_s", "total_run_s",
        F.coalesce(F.col("last_op"), F.lit("job")).alias("last_op"),
        F.when(F.col("last_op").isNull(), F.lit("unknown")).otherwise(_state(F.col("last_op"))).alias("state"),
        "put_us", "deleted_us",
    )  # fmt: skip


def _figures() -> list[Column]:
    pct = [float(p) for p in PERCENTILES]
    return [
        *(_count(op).alias(PLURAL[op]) for op in _COUNTED),
        F.percentile("wait_s", pct).alias("wait"),
        F.percentile("run_s", pct).alias("run"),
    ]


def _flatten(df: DataFrame, keys: list[str]) -> DataFrame:
    names = [f"p{round(p * 100)}" for p in PERCENTILES]
    cols: list[Any] = [*keys, *(PLURAL[op] for op in _COUNTED)]
    for kind in ("wait", "run"):
        cols += [F.col(kind)[i].alias(f"{kind}_{n}_s") for i, n in enumerate(names)]
    rate = F.col("reserves").cast("double")
    cols.append(F.when(rate > 0, (F.col("releases") + F.col("timeouts")) / rate).alias("retry_rate"))
    cols.append(F.when(rate > 0, F.col("buries") / rate).alias("bury_rate"))
    return df.select(*cols)


def windows_table(events: DataFrame, jobs: DataFrame, window_us: int) -> DataFrame:
    """Per tube and window: counts, percentiles, rates and the backlog at the window's end."""
    tubes = jobs.select("job_id", "tube")
    ev = events.join(tubes, "job_id", "left").withColumn(
        "tube", F.coalesce(F.col("tube"), F.lit(UNKNOWN_TUBE))
    ).withColumn("w", F.floor(F.col("t_us") / window_us).cast("long"))
    figures = _flatten(ev.groupBy("tube", "w").agg(*_figures()), ["tube", "w"])

    # Backlog: +1 in the window a job appears, -1 in the window it is deleted, summed over a
    # complete grid so that windows without events still carry the running total.
    born = jobs.where(F.col("put_us").isNotNull()).select(
        "tube", F.floor(F.col("put_us") / window_us).cast("long").alias("w"), F.lit(1).alias("d"))
    gone = jobs.where(F.col("deleted_us").isNotNull() & F.col("put_us").isNotNull()).select(
        "tube", F.floor(F.col("deleted_us") / window_us).cast("long").alias("w"), F.lit(-1).alias("d"))
    delta = born.unionByName(gone).groupBy("tube", "w").agg(F.sum("d").alias("d"))
    span = ev.select("w").unionByName(delta.select("w")).agg(F.min("w").alias("lo"), F.max("w").alias("hi"))
    grid = (
        span.select(F.explode(F.sequence("lo", "hi")).alias("w"))
        .crossJoin(ev.select("tube").unionByName(delta.select("tube")).distinct())
    )
    running = Window.partitionBy("tube").orderBy("w").rowsBetween(Window.unboundedPreceding, 0)
    backlog = (
        grid.join(delta, ["tube", "w"], "left")
        .withColumn("backlog", F.sum(F.coalesce(F.col("d"), F.lit(0))).over(running).cast("long"))
        .drop("d")
    )
    zero: dict[str, bool | float | int | str] = {PLURAL[op]: 0 for op in _COUNTED}
    out = backlog.join(figures, ["tube", "w"], "left").fillna(zero)
    return out.select(
        "tube",
        F.timestamp_micros(F.col("w") * window_us).alias("window_start"),
        *(c for c in out.columns if c not in ("tube", "w")),
    )


def tubes_table(events: DataFrame, jobs: DataFrame) -> DataFrame:
    """Per tube over the whole history: counts, percentiles, rates, jobs by final state."""
    ev = events.join(jobs.select("job_id", "tube"), "job_id", "left").withColumn(
        "tube", F.coalesce(F.col("tube"), F.lit(UNKNOWN_TUBE)))
    figures = _flatten(ev.groupBy("tube").agg(*_figures()), ["tube"])
    states = jobs.groupBy("tube").agg(
        F.count("*").alias("jobs"),
        F.sum(F.when(F.col("reserves") > 1, 1).otherwise(0)).cast("long").alias("retried_jobs"),
        *(F.sum(F.when(F.col("state") == s, 1).otherwise(0)).cast("long").alias(f"{s}_jobs")
          for s in ("deleted", "buried", "ready", "reserved")),
    )  # fmt: skip
    return states.join(figures, "tube", "full_outer").orderBy("tube")


def analyze_records(records: DataFrame, *, window_seconds: float = 60.0, cache: bool = False) -> Tables:
    """Build the three tables from WAL records (lazy; nothing runs until an action).

    ``cache``: keep the per-event and per-job intermediates in memory once computed, when all
    three tables will be materialised (saves recomputing the per-job window functions).
    """
    if window_seconds <= 0:
        raise ValueError(f"window_seconds must be positive, got {window_seconds}")
    window_us = max(1, round(window_seconds * _US))
    events = job_events(records)
    jobs = jobs_table(records, events)
    if cache:
        events, jobs = events.persist(), jobs.persist()
    return Tables(
        jobs=jobs.drop("put_us", "deleted_us"),
        windows=windows_table(events, jobs, window_us),
        tubes=tubes_table(events, jobs),
        cached=(events, jobs) if cache else (),
    )
