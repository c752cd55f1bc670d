"""Analytics on a scripted history: every figure is checked against what the script intended."""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa
import pytest
from spark_scenario import T0, build, percentile, restatement

from stalkd.engine.model import encode
from stalkd.spark.analytics import PLURAL, analyze_records
from stalkd.spark.batches import wal_batch

pytestmark = pytest.mark.spark


def _records_df(spark: Any, records: list[Any]) -> Any:
    batch = wal_batch(list(range(len(records))), [encode(r) for r in records])
    return spark.createDataFrame(pa.Table.from_batches([batch]))


@pytest.fixture(scope="module")
def result(spark: Any) -> Any:
    script = build()
    records = script.records()
    # A compaction restatement of a live job must not change any figure.
    records.append(dataclasses.replace(restatement(31, "images", 235.0), seq=len(records) + 1))
    tables = analyze_records(_records_df(spark, records), window_seconds=60, cache=True)
    return script.expected, tables.jobs.collect(), tables.windows.collect(), tables.tubes.collect()


def test_per_job_table_follows_each_life(result: Any) -> None:
    expected, jobs, _, _ = result
    by_id = {r.job_id: r for r in jobs}
    assert sorted(by_id) == list(range(1, 32))
    for j, state in expected.state.items():
        row = by_id[j]
        assert row.state == state, j
        assert row.reserves == expected.reserves.get(j, 0), j
        if j in expected.first_wait:
            assert row.first_wait_s == pytest.approx(expected.first_wait[j]), j
        else:
            assert row.first_wait_s is None
    assert by_id[5].releases == 1 and by_id[5].reserves == 2
    assert by_id[3].buries == 1 and by_id[3].delete_time is None
    assert by_id[21].timeouts == 1 and by_id[21].tube == "images"
    assert by_id[31].put_time.timestamp() == T0 + 230.0


def test_windows_count_every_event_once_with_backlog(result: Any) -> None:
    expected, _, windows, _ = result
    got = {(r.tube, int((r.window_start.timestamp() - T0) // 60)): r for r in windows}
    assert set(got) >= set(expected.counts)
    for key, counts in expected.counts.items():
        row = got[key]
        for op in ("put", "reserve", "delete", "release", "bury", "kick", "timeout"):
            assert getattr(row, PLURAL[op]) == counts.get(op, 0), (key, op)
    for (tube, w), row in got.items():
        end = (w + 1) * 60
        alive = sum(1 for s, e in expected.alive[tube] if s < end and (e is None or e >= end))
        assert row.backlog == alive, (tube, w)
    # job 31 stays: the last images window ends with a backlog of one
    last_images = max(w for t, w in got if t == "images")
    assert got[("images", last_images)].backlog == 1


def test_tube_percentiles_and_rates(result: Any) -> None:
    expected, _, _, tubes = result
    by_tube = {r.tube: r for r in tubes}
    assert set(by_tube) == {"emails", "images"}
    for tube, row in by_tube.items():
        for q, name in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
            assert getattr(row, f"wait_{name}_s") == pytest.approx(percentile(expected.waits[tube], q)), (tube, q)
            assert getattr(row, f"run_{name}_s") == pytest.approx(percentile(expected.runs[tube], q)), (tube, q)
    emails = by_tube["emails"]
    assert emails.jobs == 20
    assert emails.buried_jobs == 2  # jobs 3 and 10 (j % 7 == 3, not j % 5 == 0)
    assert emails.retry_rate == pytest.approx(4 / 24)  # 4 releases over 24 reserves
    assert emails.bury_rate == pytest.approx(2 / 24)
    images = by_tube["images"]
    assert images.jobs == 11 and images.ready_jobs == 1
    assert images.retry_rate == pytest.approx(10 / 20)  # 10 timeouts over 20 reserves
