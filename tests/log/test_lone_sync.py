"""A lone writer's syncs under ``always`` (GroupCommit._sync_lone, the path of one connection
writing): each covers what was written, with one fdatasync, and tickets, other threads and a
failed fsync arriving after it are served as by the general path. Real files, real fsyncs."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from stalkd.log import Log, LogError
from stalkd.log.fs import Faults


def _open(tmp_path: Path, fs: Faults) -> Log:
    return Log.open(tmp_path / "log", durability="always", segment_size=1 << 20, fs=fs)


def _write(log: Log, data: bytes) -> int:
    """Write without a sync, as the WAL does (its barriers sync after), the record's offset."""
    return log.write_many([data])[0]


def test_each_sync_covers_the_writes_with_one_fdatasync(tmp_path: Path) -> None:
    fs = Faults()
    with _open(tmp_path, fs) as log:
        for i in range(30):
            _write(log, b"record %d" % i)
            before = fs.calls.get("fdatasync", 0)
            assert log.sync() == log.next_offset == i + 1
            assert log.durable_offset == i + 1
            assert fs.calls.get("fdatasync", 0) == before + 1
            # nothing new written: nothing to fsync
            assert log.sync() == i + 1
            assert fs.calls.get("fdatasync", 0) == before + 1


def test_a_ticket_taken_between_lone_syncs_resolves(tmp_path: Path) -> None:
    fs = Faults()
    with _open(tmp_path, fs) as log:
        for i in range(10):
            _write(log, b"r%d" % i)
            log.sync()
        t = log.submit([b"ticketed"])  # the committer thread syncs for it
        _write(log, b"after")
        assert log.sync() == 12
        t.wait(timeout=60)
        assert t.done() and t.exception() is None
        for i in range(5):  # the lone path again
            _write(log, b"s%d" % i)
            assert log.sync() == 13 + i
        assert log.durable_offset == log.next_offset == 17


def test_another_thread_joining_after_lone_syncs(tmp_path: Path) -> None:
    fs = Faults()
    with _open(tmp_path, fs) as log:
        for i in range(10):
            _write(log, b"main %d" % i)
            log.sync()
        seen: list[tuple[int, int]] = []

        def other() -> None:
            for i in range(20):
                off = _write(log, b"other %d" % i)
                seen.append((off, log.sync()))

        th = threading.Thread(target=other)
        th.start()
        mine: list[tuple[int, int]] = []
        for i in range(20):
            off = _write(log, b"main again %d" % i)
            mine.append((off, log.sync()))
        th.join()
        assert len(seen) == len(mine) == 20
        assert all(durable > off for off, durable in seen + mine)
        for i in range(5):  # and alone again
            off = _write(log, b"last %d" % i)
            assert log.sync() == off + 1
        assert log.durable_offset == log.next_offset == 55


def test_a_failed_fsync_on_the_lone_path_fails_the_log(tmp_path: Path) -> None:
    fs = Faults()
    with _open(tmp_path, fs) as log:
        for i in range(5):
            _write(log, b"r%d" % i)
            log.sync()
        _write(log, b"lost")
        fs.fail("fdatasync", errno.EIO)
        with pytest.raises(LogError):
            log.sync()
        assert log.durable_offset == 5
        fs.heal()
        with pytest.raises(LogError):  # the page cache may have dropped it: never durable now
            log.sync_to(None)
        with pytest.raises(LogError):  # and nothing more is taken
            _write(log, b"more")
