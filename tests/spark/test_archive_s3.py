"""The sharded manifest and ``stalkd log inspect s3://...`` against a real S3 API server (moto,
started by the ``s3_server`` fixture): parts are objects of their own, a reader plans from the
index and the parts it needs, and ``--verify`` names an object the store lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from stalkd.archive.remote import load_index, load_manifest, load_segments
from stalkd.archive.shipper import Shipper
from stalkd.archive.store import Store
from stalkd.log import Log
from stalkd.node.logcmd import log_main


def test_sharded_manifest_and_inspect_on_s3(s3_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s3_server.create_bucket("inspect")
    url = "s3://inspect/q"
    store = Store.open(url)
    with Log.open(tmp_path / "wal", segment_size=4096, durability="never") as log:
        log.append_many(f"job-{i:05d}".encode() * (1 + i % 7) for i in range(500))
        assert Shipper(str(tmp_path), store, part_size=2).ship_once() >= 4
        sealed = [(b, e) for b, e, _p in log.segment_bounds() if e is not None]
    # Given segments shipped, the manifest's parts are objects of their own
    index = load_index(store)
    listed = store.fs.get_file_info(pafs.FileSelector(store.path("manifest")))
    assert sorted(i.base_name for i in listed) == sorted(p.name.split("/")[1] for p in index.parts)
    assert [(s.base, s.end) for s in load_manifest(store).segments] == sealed
    # A reader of the first offsets reads only the first part
    first = index.parts[0]
    assert [(s.base, s.end) for s in load_segments(store, end_before=first.end)] == sealed[: first.count]
    # inspect --verify checks every object against the manifest
    assert log_main(["inspect", url, "--verify", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(s["base"], s["end"], s["frames"]) for s in report["segments"]] == [(b, e, e - b) for b, e in sealed]
    # and names a segment the store lost
    lost = load_manifest(store).segments[2]
    store.delete(lost.name)
    assert log_main(["inspect", url, "--verify"]) == 1
    assert f"{url}/{lost.name}" in capsys.readouterr().out
    # A bucket prefix with no archive is an error naming it, exit 2
    assert log_main(["inspect", "s3://inspect/nothing-here"]) == 2
    assert "no stalkd archive here" in capsys.readouterr().err
