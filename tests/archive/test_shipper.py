"""The shipper copies sealed segments to an archive and publishes them in the manifest last;
retention keeps what is not shipped; the archive reads back frame for frame."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stalkd.archive.manifest import MANIFEST_NAME, Index, ManifestError, Part, SegmentEntry
from stalkd.archive.remote import ArchiveCorruptError, fetch_segment, load_manifest
from stalkd.archive.shipper import Shipper
from stalkd.archive.store import Store
from stalkd.log import Log, LogReader
from stalkd.log.columns import segment_columns
from stalkd.log.errors import NotALogError


def _log(data: Path, n: int, size: int = 4096) -> Log:
    log = Log.open(data / "wal", segment_size=size, durability="never")
    log.append_many(f"job-{i:05d}".encode() * (1 + i % 7) for i in range(n))
    return log


def _archived_frames(store: Store) -> list[tuple[int, int, bytes]]:
    out = []
    for e in load_manifest(store).segments:
        view = fetch_segment(store, e)
        for c in segment_columns(view, e.base, None, 1000):
            out += [(o, t, bytes(p)) for o, t, p in zip(c.offsets, c.timestamps_us, c.payloads(), strict=True)]
        view.close()
    return out


def test_ships_every_sealed_segment_and_reads_back_frame_for_frame(tmp_path: Path) -> None:
    with _log(tmp_path, 500) as log:
        store = Store.open(str(tmp_path / "arch"))
        shipper = Shipper(str(tmp_path), store)
        assert shipper.ship_once() > 3
        sealed = [(b, e) for b, e, _p in log.segment_bounds() if e is not None]
        manifest = load_manifest(store)
        assert [(s.base, s.end) for s in manifest.segments] == sealed
        assert shipper.shipped_end() == sealed[-1][1]
        with LogReader(tmp_path / "wal") as r:
            want = [(f.offset, f.timestamp_us, f.bytes()) for f in r.read(0, sealed[-1][1])]
        assert _archived_frames(store) == want
        for s in manifest.segments:
            assert s.min_us <= s.max_us and s.min_us > 0
        # compact: the preallocated zeros after the last frame are not shipped
        assert sum(s.size for s in manifest.segments) < 4096 * len(manifest.segments)
        assert shipper.ship_once() == 0  # nothing new: nothing shipped twice
        log.append_many([b"x" * 300] * 40)
        assert shipper.ship_once() > 0
        assert [(s.base, s.end) for s in load_manifest(store).segments] == \
            [(b, e) for b, e, _p in log.segment_bounds() if e is not None]  # fmt: skip


def test_retention_waits_for_shipping(tmp_path: Path) -> None:
    with _log(tmp_path, 500) as log:
        shipper = Shipper(str(tmp_path), Store.open(str(tmp_path / "arch")))
        log.retention_hold = shipper.shipped_end
        before = log.segment_bounds()
        assert log.retain(10**9) == []  # nothing shipped yet: nothing may go
        assert log.segment_bounds() == before
        shipper.ship_once()
        removed = log.retain(10**9)
        assert len(removed) == len(before) - 1  # every sealed one, now that it is archived
        with pytest.raises(OSError):
            os.stat(removed[0])


def test_a_manifest_never_names_an_object_that_is_not_whole(tmp_path: Path) -> None:
    """Objects are written before the manifest names them; a reader checks size and CRC."""
    with _log(tmp_path, 300):
        store = Store.open(str(tmp_path / "arch"))
        Shipper(str(tmp_path), store).ship_once()
    entry = load_manifest(store).segments[1]
    obj = tmp_path / "arch" / entry.name
    data = obj.read_bytes()
    obj.write_bytes(data[: len(data) // 2])  # what a torn copy would look like
    with pytest.raises(ArchiveCorruptError, match="manifest records"):
        fetch_segment(store, entry)
    # an orphan object (shipped, crash before the manifest) is not part of the archive
    (tmp_path / "arch" / "segments" / "seg-99999999999999999999.log").write_bytes(b"junk")
    assert all(s.base != 99999999999999999999 for s in load_manifest(store).segments)


def test_empty_or_foreign_archive_is_an_error_not_empty(tmp_path: Path) -> None:
    with pytest.raises(NotALogError, match="no stalkd archive"):
        load_manifest(Store.open(str(tmp_path)))
    (tmp_path / MANIFEST_NAME).write_text('{"format": 9, "segments": []}')
    with pytest.raises(ManifestError, match="format 9"):
        load_manifest(Store.open(str(tmp_path)))


def test_manifest_round_trip_and_overlap() -> None:
    index, part = Index(part_size=2).with_segment(Part(), SegmentEntry("a", 0, 10, 1, 2, 100, 5))
    assert Index.decode(index.encode()) == index and Part.decode(part.encode()) == part
    with pytest.raises(ManifestError, match="overlaps"):
        index.with_segment(part, SegmentEntry("b", 9, 20, 1, 2, 100, 5))
