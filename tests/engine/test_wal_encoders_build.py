"""Which encoders the WAL writes with: model.encode and frame's (compiled by Cython, or their
.py files under ``STALKD_NO_EXTENSIONS=1`` or without a build), the write chain's compiled
twins when built; and what it writes reads back either way."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from stalkd.engine import model
from stalkd.engine.model import Op, Record
from stalkd.log import fastwrite, frame, log, writer
from stalkd.persist import fastwal, wal

_DISABLED = os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")


def _expected(module: str) -> str:
    return "c" if importlib.util.find_spec(module) is not None and not _DISABLED else "python"


def test_the_active_encoders_follow_the_build_and_the_switch() -> None:
    # the write chain's twins stand in for the methods on their classes, or are absent
    assert _expected("stalkd.log._write") == fastwrite.IMPLEMENTATION
    assert hasattr(log.Log.write_many, "reference") == (fastwrite.IMPLEMENTATION == "c")
    assert _expected("stalkd.engine._wal") == fastwal.IMPLEMENTATION
    assert hasattr(wal.Wal.write, "reference") == (fastwal.IMPLEMENTATION == "c")


def test_the_wal_writes_with_the_active_encoders(tmp_path: Path) -> None:
    assert wal.encode is model.encode
    assert writer.encode_data_frames is frame.encode_data_frames
    assert writer.put_data_frame is frame.put_data_frame
    recs = [Record(Op.PUT, 1, 10, 1, "default", 5, 0, 60, 0, b"body", created_us=10),
            Record(Op.RELEASE, 2, 11, 1, pri=7, delay=3, deadline_us=99), Record(Op.DELETE, 3, 12, 1)]  # fmt: skip
    with wal.Wal.open(tmp_path, durability="never") as w:
        w.recover(now=0.0)
        w.write(recs)
        w.sync()
        got = [model.decode(f.payload) for f in w.log.read(0)]
    assert got == recs
