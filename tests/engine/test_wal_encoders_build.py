"""Which code the WAL writes with: one implementation of each step (model.encode, frame's
encoders, the write chain of wal, space, log, writer, active, commit and fs), compiled
by Cython where built, their .py files under ``STALKD_NO_EXTENSIONS=1`` or without a build; and
what it writes reads back either way."""

from __future__ import annotations

import os
from pathlib import Path

from stalkd.engine import model
from stalkd.engine.model import Op, Record
from stalkd.extensions import CYTHON_MODULES, compiled_modules
from stalkd.log import frame, log, writer
from stalkd.persist import wal

_DISABLED = os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")


CHAIN = ("stalkd.engine.model", "stalkd.persist.wal", "stalkd.engine.space",
         "stalkd.log.log", "stalkd.log.writer", "stalkd.log.active", "stalkd.log.commit", "stalkd.log.fs",
         "stalkd.log.frame")  # fmt: skip


def test_the_write_chain_is_compiled_from_its_own_files_or_runs_them() -> None:
    assert set(CHAIN) <= set(CYTHON_MODULES)
    compiled = compiled_modules()
    states = {compiled[name] for name in CHAIN}
    assert len(states) == 1, compiled  # built together, switched together
    if _DISABLED:
        assert states == {False}
    # nothing stands in for a method on the classes: the method is the class's own
    assert wal.Wal.__dict__["write"].__module__ == "stalkd.persist.wal"
    assert log.Log.__dict__["write_many"].__module__ == "stalkd.log.log"
    assert log.Log.__dict__["sync"].__module__ == "stalkd.log.log"


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
