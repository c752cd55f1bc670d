"""Columnar log reads against the per-frame reads they replace, in one process, no Spark.

Writes N WAL records (spark_bench's mix) to a log with 16 MiB segments, then times, best of 3:

* scan: ``LogReader.read_segment`` (a ``Frame`` per record) vs ``read_segment_columns``;
* Arrow batches of the Spark source's default size, raw and ``records=wal``: the per-frame builders
  (``raw_batch`` / ``wal_batch`` over ``read_segment``) vs ``stalkd.spark.columnar``
  over ``read_segment_columns`` (what the Spark source's ``read()`` now does).

    .venv/bin/python bench/log_columns_bench.py              # 300k records
    .venv/bin/python bench/log_columns_bench.py --records 1000000

Prints rows/s and the columnar / per-frame ratio for each (CRC checks on in both).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path

from spark_bench import records

from stalkd.engine.model import encode
from stalkd.log import Log, LogReader
from stalkd.spark.batches import raw_batch, wal_batch
from stalkd.spark.columnar import raw_columns_batch, wal_columns_batch
from stalkd.spark.source import DEFAULT_BATCH

BATCH = DEFAULT_BATCH  # rows per batch, as the Spark source reads them


def write_log(d: Path, n: int) -> None:
    with Log.open(d, segment_size=16 * 2**20, durability="never") as log:
        gen = records(n)
        while chunk := [encode(r) for r in islice(gen, 65536)]:
            log.append_many(chunk)


def per_frame_batches(reader: LogReader, path: str, wal: bool) -> Iterator[object]:
    frames = reader.read_segment(path)
    while chunk := list(islice(frames, BATCH)):
        offsets, stamps, payloads = zip(*chunk, strict=True)
        yield wal_batch(offsets, payloads) if wal else raw_batch(offsets, stamps, payloads)


def columnar_batches(reader: LogReader, path: str, wal: bool) -> Iterator[object]:
    for cols in reader.read_segment_columns(path, None, None, BATCH):
        yield wal_columns_batch(cols) if wal else raw_columns_batch(cols)


def best_rate(n: int, action: Callable[[], int]) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        got = action()
        best = min(best, time.perf_counter() - t)
        assert got == n, (got, n)
    return n / best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="stalkd-columns-bench-"))
    try:
        write_log(root / "wal", args.records)
        reader = LogReader(root / "wal")
        paths = [s.path for s in reader.segments()]
        n = args.records

        def scan_frames() -> int:
            return sum(1 for p in paths for _ in reader.read_segment(p))

        def scan_columns() -> int:
            return sum(len(c) for p in paths for c in reader.read_segment_columns(p, None, None, BATCH))

        def batches(make: Callable[[LogReader, str, bool], Iterator[object]], wal: bool) -> Callable[[], int]:
            return lambda: sum(b.num_rows for p in paths for b in make(reader, p, wal))  # type: ignore[attr-defined]

        cases = [
            ("scan", scan_frames, scan_columns),
            ("raw batches", batches(per_frame_batches, False), batches(columnar_batches, False)),
            ("wal batches", batches(per_frame_batches, True), batches(columnar_batches, True)),
        ]
        print(f"{n:,} records, {len(paths)} segments, one process, best of 3 (rows/s):")
        for name, old, new in cases:
            before, after = best_rate(n, old), best_rate(n, new)
            print(f"  {name:<12} per-frame {before:>11,.0f}   columnar {after:>11,.0f}   ratio {after / before:.2f}x")
        reader.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
