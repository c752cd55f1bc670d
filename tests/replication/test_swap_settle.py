"""``swap.settle`` at start-up, on a real directory: a swap cut short after ``READY`` is finished,
its leftovers after the renames are removed, and a copy cut short before ``READY`` is removed
with the local state untouched. Each of the three says what it did (the server logs it); an
untouched directory says nothing."""

from __future__ import annotations

from pathlib import Path

from stalkd.replication.swap import READY, RESYNC_DIR, settle


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _local(d: Path) -> None:
    (d / "wal").mkdir(parents=True)
    (d / "wal" / "seg").write_bytes(b"local wal")
    (d / "snapshots").mkdir()
    (d / "snapshots" / "snap").write_bytes(b"local snapshot")


def test_nothing_to_settle_says_nothing(tmp_path: Path) -> None:
    _local(tmp_path)
    before = _tree(tmp_path)
    assert settle(str(tmp_path)) is None
    assert _tree(tmp_path) == before


def test_a_copy_cut_short_before_ready_is_removed_and_said(tmp_path: Path) -> None:
    _local(tmp_path)
    before = _tree(tmp_path)
    staging = tmp_path / RESYNC_DIR
    (staging / "wal").mkdir(parents=True)
    (staging / "wal" / "seg").write_bytes(b"half a copy")
    said = settle(str(tmp_path))
    assert said is not None and "incomplete copy" in said and "unchanged" in said
    assert not staging.exists()
    assert _tree(tmp_path) == before, "the local state is left as it was"


def test_a_swap_cut_short_after_ready_is_finished(tmp_path: Path) -> None:
    _local(tmp_path)
    staging = tmp_path / RESYNC_DIR
    (staging / "wal").mkdir(parents=True)
    (staging / "wal" / "seg").write_bytes(b"primary wal")
    (staging / READY).write_bytes(b"\nthe primary's history diverged")
    said = settle(str(tmp_path))
    assert said is not None and "finished swapping" in said and "diverged" in said
    assert (tmp_path / "wal" / "seg").read_bytes() == b"primary wal"
    assert not staging.exists()
    kept = [p.read_bytes() for p in (tmp_path / "quarantine").rglob("seg")]
    assert kept == [b"local wal"], "the local WAL is quarantined, not deleted"


def test_leftovers_of_a_finished_swap_are_removed_and_said(tmp_path: Path) -> None:
    (tmp_path / "wal").mkdir()
    (tmp_path / "wal" / "seg").write_bytes(b"primary wal")  # the renames of step 3 happened
    staging = tmp_path / RESYNC_DIR
    staging.mkdir()
    (staging / READY).write_bytes(b"7\nbehind the primary's retention")
    said = settle(str(tmp_path))
    assert said is not None and "what was left of a swap" in said and "retention" in said
    assert not staging.exists()
    assert (tmp_path / "wal" / "seg").read_bytes() == b"primary wal"
