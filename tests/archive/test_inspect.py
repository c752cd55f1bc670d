"""``stalkd log inspect`` on an archive (a directory here; s3:// in tests/spark/test_archive_s3.py):
the manifest's segments and parts, and with ``--verify`` every object checked against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stalkd.archive.note import write_note
from stalkd.archive.remote import load_index, load_manifest
from stalkd.archive.shipper import Shipper
from stalkd.archive.store import Store
from stalkd.log import Log
from stalkd.node.logcmd import log_main


def _archive(tmp_path: Path) -> tuple[Path, list[tuple[int, int]]]:
    with Log.open(tmp_path / "wal", segment_size=4096, durability="never") as log:
        log.append_many(f"job-{i:05d}".encode() * (1 + i % 7) for i in range(500))
        Shipper(str(tmp_path), Store.open(str(tmp_path / "arch")), part_size=2).ship_once()
        sealed = [(b, e) for b, e, _p in log.segment_bounds() if e is not None]
    return tmp_path / "arch", sealed


def _inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = log_main(["inspect", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_intact_archive_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arch, sealed = _archive(tmp_path)
    code, out, _ = _inspect(capsys, str(arch), "--verify", "--json")
    report = json.loads(out)
    assert code == 0 and report["corrupt"] == []
    assert [(s["base"], s["end"]) for s in report["segments"]] == sealed
    assert [s["frames"] for s in report["segments"]] == [e - b for b, e in sealed]
    assert report["parts"] == len(load_index(Store.open(str(arch))).parts) >= 2
    code, out, _ = _inspect(capsys, str(arch), "--verify")
    assert code == 0 and "verify: OK" in out and f"{len(sealed)} segments" in out


def test_a_damaged_segment_is_found_by_verify_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arch, _ = _archive(tmp_path)
    entry = load_manifest(Store.open(str(arch))).segments[1]
    obj = arch / entry.name
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one bit pattern changed: only a CRC can tell
    obj.write_bytes(bytes(data))
    code, out, _ = _inspect(capsys, str(arch))
    assert code == 0  # the manifest alone is intact
    code, out, _ = _inspect(capsys, str(arch), "--verify")
    assert code == 1 and f"CORRUPT {arch}/{entry.name}" in out and "manifest records" in out


def test_a_lost_manifest_part_is_damage_without_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arch, _ = _archive(tmp_path)
    part = load_index(Store.open(str(arch))).parts[0]
    (arch / part.name).unlink()
    code, out, _ = _inspect(capsys, str(arch))
    assert code == 1 and part.name in out and "missing" in out


def test_a_directory_without_an_archive_or_a_log_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _inspect(capsys, "file://" + str(tmp_path))
    assert code == 2 and "no stalkd archive here" in err
    code, _, _ = _inspect(capsys, str(tmp_path))
    assert code == 2


def test_a_data_dir_is_inspected_with_the_archive_its_server_ships_to(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Given a server data dir whose first segments were shipped, then deleted by retention
    data, arch = tmp_path / "data", tmp_path / "arch"
    data.mkdir()
    write_note(str(data), str(arch))  # what `stalkd serve -b DATA --archive URL` leaves
    with Log.open(data / "wal", segment_size=4096, durability="never") as log:
        log.append_many(f"job-{i:05d}".encode() * (1 + i % 7) for i in range(300))
        shipper = Shipper(str(data), Store.open(str(arch)))
        log.retention_hold = shipper.shipped_end
        shipper.ship_once()
        assert log.retain(10**9)
        local_first = log.segment_bounds()[0][0]
    # When it is inspected (as DATA, or -b DATA) with --verify
    code, out, _ = _inspect(capsys, "-b", str(data), "--verify", "--json")
    report = json.loads(out)
    # Then the archive holds the offsets before the local log's, every object checked
    assert code == 0 and report["corrupt"] == [] and report["archive"]["corrupt"] == []
    assert report["segments"][0]["base"] == local_first > 0
    assert [s["base"] for s in report["archive"]["segments"]][0] == 0
    assert report["archive"]["segments"][-1]["end"] == local_first
    code, out, _ = _inspect(capsys, str(data))
    assert code == 0 and f"shipped to {arch}" in out and "segments/seg-00000000000000000000.log" in out
    # And an object the archive lost is damage of the data dir's log, exit 1
    lost = load_manifest(Store.open(str(arch))).segments[1]
    Store.open(str(arch)).delete(lost.name)
    code, out, _ = _inspect(capsys, str(data), "--verify")
    assert code == 1 and f"{arch}/{lost.name}" in out


def test_a_data_dir_whose_server_has_shipped_nothing_yet_is_not_damaged(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with Log.open(tmp_path / "wal", durability="never") as log:
        log.append_many([b"a", b"b"])
    write_note(str(tmp_path), str(tmp_path / "arch"))
    code, out, _ = _inspect(capsys, str(tmp_path))
    assert code == 0 and "nothing yet (no manifest)" in out
