"""The archive manifest is sharded: publishing a segment rewrites only the last part and the
small index, a reader reads only the parts its offsets or times need, a part entry the index
does not count yet is not part of the archive, a format-1 manifest still reads and is
converted, and snapshots no reader needs are pruned (out of the index, then deleted)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from stalkd.archive.manifest import MANIFEST_NAME, Part, SegmentEntry
from stalkd.archive.remote import ArchiveCorruptError, load_index, load_manifest, load_segments
from stalkd.archive.shipper import Shipper
from stalkd.archive.store import Store
from stalkd.log import Log
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Delete, Put

T = 1_700_000_000.0


def _fill(data: Path, n: int) -> Log:
    """A log of ``n`` records, appended 50 at a time, each batch stamped later than the last."""
    log = Log.open(data / "wal", segment_size=4096, durability="never")
    for k in range(0, n, 50):
        t0 = time.time_ns() // 1000
        log.append_many(f"job-{i:05d}".encode() * (1 + i % 7) for i in range(k, min(n, k + 50)))
        while time.time_ns() // 1000 <= t0 + 1:  # the clock moves on before the next batch
            pass
    return log


def _sealed(log: Log) -> list[tuple[int, int]]:
    return [(b, e) for b, e, _p in log.segment_bounds() if e is not None]


def test_full_parts_are_never_rewritten_and_the_index_grows_per_part(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    store = Store.open(str(arch))
    with _fill(tmp_path, 700) as log:
        shipper = Shipper(str(tmp_path), store, part_size=3)
        shipped = shipper.ship_once()
        assert shipped >= 7
        parts = sorted((arch / "manifest").glob("part-*.json"))
        assert len(parts) == -(-shipped // 3)
        full = {p.name: p.read_bytes() for p in parts if len(json.loads(p.read_bytes())["segments"]) == 3}
        index_size = (arch / MANIFEST_NAME).stat().st_size
        log.append_many([b"y" * 200] * 200)
        assert shipper.ship_once() > 3
        # Given more segments shipped, the full parts are byte for byte what they were
        assert all((arch / "manifest" / name).read_bytes() == data for name, data in full.items())
        # and the index holds one entry per part, not per segment
        index = load_index(store)
        assert sum(p.count for p in index.parts) == len(_sealed(log))
        assert all(p.count <= 3 for p in index.parts)
        assert (arch / MANIFEST_NAME).stat().st_size < index_size * (len(index.parts) + 1)
        assert [(s.base, s.end) for s in load_manifest(store).segments] == _sealed(log)


def test_a_reader_reads_only_the_parts_it_needs(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    store = Store.open(str(arch))
    with _fill(tmp_path, 400) as log:
        Shipper(str(tmp_path), store, part_size=2).ship_once()
        sealed = _sealed(log)
    index = load_index(store)
    assert len(index.parts) >= 3
    last = index.parts[-1]
    # When the last part's object is gone, a read of the offsets before it does not notice
    (arch / last.name).unlink()
    got = load_segments(store, end_before=last.base)
    assert [(s.base, s.end) for s in got] == [x for x in sealed if x[0] < last.base]
    # and a read by time that excludes it does not either (its frames are all later)
    got = load_segments(store, t_hi=index.parts[0].max_us)
    assert got and all(s.base < last.base for s in got)
    # but a read of everything does, naming the part
    with pytest.raises(ArchiveCorruptError, match=last.name):
        load_manifest(store)


def test_a_part_entry_the_index_does_not_count_is_not_in_the_archive(tmp_path: Path) -> None:
    """What a crash between writing the part and publishing the index leaves."""
    arch = tmp_path / "arch"
    store = Store.open(str(arch))
    with _fill(tmp_path, 300):
        Shipper(str(tmp_path), store, part_size=100).ship_once()
    index = load_index(store)
    (last,) = index.parts
    part = Part.decode((arch / last.name).read_bytes())
    extra = SegmentEntry("segments/seg-99999999999999999999.log", last.end, last.end + 5, 1, 2, 99, 1)
    (arch / last.name).write_bytes(part.with_segment(extra).encode())
    segs = load_manifest(store).segments
    assert len(segs) == last.count and segs[-1].end == last.end


def test_a_format_1_manifest_reads_and_is_converted_when_shipping_goes_on(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    store = Store.open(str(arch))
    with _fill(tmp_path, 400) as log:
        Shipper(str(tmp_path), store, part_size=2).ship_once()
        segs = load_manifest(store).segments
        # Given the archive an earlier build wrote: one document, format 1
        v1 = {"format": 1, "segments": [s.__dict__ for s in segs[:3]], "snapshots": []}
        (arch / MANIFEST_NAME).write_text(json.dumps(v1))
        assert load_manifest(store).segments == segs[:3]
        # When shipping goes on, the index becomes format 2 and nothing is shipped twice
        assert Shipper(str(tmp_path), store, part_size=2).ship_once() == len(segs) - 3
        assert json.loads((arch / MANIFEST_NAME).read_bytes())["format"] == 2
        assert [(s.base, s.end) for s in load_manifest(store).segments] == _sealed(log)


def _churn(wal: Wal, n: int, shipper: Shipper) -> None:
    """``n`` puts and deletes, compaction (a snapshot) and a final snapshot, shipping between."""
    wal.log.retention_hold = shipper.shipped_end  # as `stalkd serve --archive` does
    eng, _ = wal.recover(now=T)
    eng.connect(1, T)
    for _ in range(n):
        out = eng.apply(1, Put(0, 0, 60, b"x" * 200), T)
        wal.write(out.records)
        (jid,) = [r.job_id for r in out.records]
        wal.write(eng.apply(1, Delete(jid), T).records)
    wal.write(eng.apply(1, Put(0, 0, 60, b"kept"), T).records)
    wal.sync()
    while wal.maintain(eng, T):
        shipper.ship_once()
    shipper.ship_once()
    assert wal.final_snapshot(eng) is None


def test_snapshots_no_reader_needs_are_pruned(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    store = Store.open(str(arch))
    shipper = Shipper(str(tmp_path), store)
    names: list[str] = []
    for _ in range(3):
        with Wal.open(tmp_path, durability="never", segment_size=65536, background=False) as wal:
            _churn(wal, 200, shipper)
        shipper.ship_once()
        names += [s.name for s in load_index(store).snapshots if s.name not in names]
    # Given snapshots shipped over time
    assert len(names) >= 3
    index = load_index(store)
    # Then the newest one whose records are all shipped is kept, and those newer still (their
    # records are not all shipped yet), and every older one is gone from the index and the store
    covered = [s for s in index.snapshots if s.start is not None and s.start <= index.end]
    assert len(covered) == 1
    assert all(s.start is not None and s.start > index.end for s in index.snapshots if s not in covered)
    kept = {s.name for s in index.snapshots}
    assert all(n > covered[0].name for n in kept - {covered[0].name})
    pruned = set(names) - kept
    assert pruned and all(n < covered[0].name for n in pruned)
    assert sorted(f"snapshots/{p.name}" for p in (arch / "snapshots").iterdir()) == sorted(kept)
