"""Full disk and failing fsync: refused appends write nothing, the log stays readable, and works
again once space returns; an fsync error is fatal for the log object. Faults are injected
through the file-system seam (``stalkd.log.fs.Faults``), or made real with a small tmpfs."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalkd.log import Log, LogError, LogFullError
from stalkd.log.fs import Faults
from support import small_tmpfs


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for this test (needs root and mount; skipped where the machine forbids it)."""
    with small_tmpfs(tmp_path, "2m") as mnt:
        yield mnt


def test_real_full_disk_refuses_then_recovers(small_fs: Path) -> None:
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"\1" * (1024 * 1024))
    d = small_fs / "log"
    payload = b"p" * 1000
    written: list[int] = []
    with Log.open(d, segment_size=128 * 1024, durability="always") as log:
        with pytest.raises(LogFullError, match="no space for a new") as exc:
            for _ in range(10_000):
                written.append(log.append(payload))
        assert str(d) in str(exc.value)
        assert len(written) > 100 and log.next_offset == len(written)
        # The log is consistent and readable after the refusal
        assert [f.offset for f in log.read(0)] == written
        with pytest.raises(LogFullError):
            log.append_many([payload] * 200)  # still full: a whole batch is refused, nothing written
        assert log.next_offset == len(written)
        # Once space returns, appends work again
        ballast.unlink()
        more = log.append_many([payload] * 200)
        assert more == (len(written), len(written) + 199)
    with Log.open(d, segment_size=128 * 1024) as log:
        assert log.next_offset == len(written) + 200
        assert all(f.bytes() == payload for f in log.read(0))


def test_injected_allocation_failure_at_the_segment_boundary(tmp_path: Path) -> None:
    fs = Faults()
    with Log.open(tmp_path, segment_size=4096, durability="always", fs=fs) as log:
        log.append_many([b"a" * 100] * 20)  # 20 frames of 128 B: the first segment holds 31
        before = log.next_offset
        fs.fail("allocate", errno.ENOSPC)
        # A batch that would cross into a new segment is refused whole
        with pytest.raises(LogFullError, match="offset 31"):
            log.append_many([b"b" * 100] * 20)
        assert log.next_offset == before
        assert not list(tmp_path.glob("*.tmp")) and len(list(tmp_path.glob("seg-*.log"))) == 1
        assert log.append(b"fits") == before  # what still fits in the segment is accepted
        fs.heal()
        first, last = log.append_many([b"c" * 100] * 20)
        assert (first, last) == (before + 1, before + 20)
    with Log.open(tmp_path, segment_size=4096) as log:
        assert [f.bytes()[:1] for f in log.read(0)] == [b"a"] * 20 + [b"f"] + [b"c"] * 20


def test_fsync_error_is_fatal_for_the_log(tmp_path: Path) -> None:
    fs = Faults()
    log = Log.open(tmp_path, durability="always", fs=fs)
    log.append(b"safe")
    fs.fail("fdatasync", errno.EIO)
    with pytest.raises(LogError, match="fsync .* failed"):
        log.append(b"lost?")
    fs.heal()
    # Never swallowed: every later operation refuses, naming the failure
    with pytest.raises(LogError, match="failed"):
        log.append(b"more")
    with pytest.raises(LogError, match="failed"):
        log.sync()
    log.close()
    with Log.open(tmp_path) as again:  # reopening recovers what is on disk
        assert next(iter(again.read(0))).bytes() == b"safe"


def test_fsync_error_fails_pending_tickets(tmp_path: Path) -> None:
    fs = Faults()
    log = Log.open(tmp_path, durability="always", fs=fs)
    fs.fail("fdatasync", errno.EIO)
    t = log.submit([b"x"])
    with pytest.raises(LogError, match="failed"):
        t.wait(timeout=60)
    assert t.done() and isinstance(t.exception(), LogError)
    fs.heal()
    log.close()


def test_a_failed_write_is_refused_and_zeroed(tmp_path: Path) -> None:
    """EIO from a write: the append is refused, the log stays usable, the frame never appears."""
    fs = Faults()
    with Log.open(tmp_path, durability="always", io="pwrite", fs=fs) as log:
        log.append(b"before")
        fs.fail("pwrite", errno.EIO, match="seg-", times=1)  # the write fails, the zeroing works
        with pytest.raises(LogError, match="write failed at byte"):
            log.append_many([b"refused"])
        assert log.append(b"after") == 1
    with Log.open(tmp_path) as log:
        assert [f.bytes() for f in log.read(0)] == [b"before", b"after"]


def test_short_writes_still_write_every_byte(tmp_path: Path) -> None:
    fs = Faults()
    fs.short_writes(5)  # every pwrite/write puts at most 5 bytes
    payloads = [bytes([i]) * (i * 37 % 300) for i in range(60)]
    with Log.open(tmp_path, durability="always", io="pwrite", segment_size=4096, fs=fs) as log:
        log.append_many(payloads[:30])
        for p in payloads[30:]:
            log.append(p)
        g = log.group("g")
        g.ack(*g.poll(10))  # a cursor checkpoint, written 5 bytes at a time
    assert fs.calls["pwrite"] > 1000
    with Log.open(tmp_path) as log:
        assert [f.bytes() for f in log.read(0)] == payloads
        assert log.group("g").committed == 10
