"""A standby whose disk fills refuses the stream, not dies: once there is room again it catches
up by itself (the fault campaign's full-disk run found the standby's receiver stopped for good
at the first segment it had no room for, and a --sync-standbys 1 primary then blocked every
write)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import stalkd
from support import small_tmpfs

from .cluster import caught_up, primary, snapshot, standby, until


def _fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    with open(filler, "wb") as f, contextlib.suppress(OSError):  # ENOSPC: full
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    return filler


def test_a_standby_out_of_space_catches_up_once_there_is_room(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path, "4m") as mnt:
        p = primary(tmp_path / "p")
        s = standby(mnt / "s", p)
        try:
            until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
            # Given a standby whose file system is full
            filler = _fill(mnt)
            # When the primary writes more than the standby's current segment holds
            with stalkd.Client(p.address) as c:
                for i in range(200):
                    c.put(b"x" * 1024 + str(i).encode())
            until(lambda: "no space" in s.log_text(), "the standby to run out of space", logs=(p, s))
            assert not caught_up(p, s)
            # Then, once there is room again, it catches up by itself and holds every job
            os.unlink(filler)
            until(lambda: caught_up(p, s), "the standby to catch up", timeout=60, logs=(p, s))
            assert s.proc.poll() is None
            assert snapshot(s, 210) == snapshot(p, 210)
        finally:
            s.stop()
            p.stop()
