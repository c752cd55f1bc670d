"""Zeroing ahead of the data under ``always`` (active.ZERO_AHEAD): the blocks the next appends
land in are written extents, not the unwritten ones ``posix_fallocate`` leaves (whose first
write costs every fdatasync a journal commit); the zeros change nothing a reader or recovery
sees, and a failed zeroing write refuses the append without harming the log."""

from __future__ import annotations

import errno
import fcntl
import struct
from pathlib import Path

import pytest

from stalkd.log import Log, LogError, LogReader
from stalkd.log.active import ZERO_AHEAD
from stalkd.log.fs import Faults

_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP = struct.Struct("=QQLLLL")  # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
_EXTENT = struct.Struct("=QQQQQLLLL")  # fe_logical, fe_physical, fe_length, 2 reserved, fe_flags, 3 reserved
_FIEMAP_FLAG_SYNC = 1
_EXTENT_UNWRITTEN = 0x800
_MAX_EXTENTS = 64


def unwritten_bytes(path: Path, start: int, length: int) -> int | None:
    """Bytes of ``[start, start + length)`` in unwritten extents (None: the file system has no
    FIEMAP, or no unwritten extents at all, so there is nothing to check)."""
    buf = bytearray(_FIEMAP.pack(start, length, _FIEMAP_FLAG_SYNC, 0, _MAX_EXTENTS, 0))
    buf += bytes(_EXTENT.size * _MAX_EXTENTS)
    with open(path, "rb") as f:
        try:
            fcntl.ioctl(f.fileno(), _FS_IOC_FIEMAP, buf)
        except OSError:
            return None
    n = _FIEMAP.unpack_from(buf)[3]
    total = 0
    for i in range(n):
        logical, _phys, size, _r1, _r2, flags, *_ = _EXTENT.unpack_from(buf, _FIEMAP.size + i * _EXTENT.size)
        lo, hi = max(logical, start), min(logical + size, start + length)
        if flags & _EXTENT_UNWRITTEN and hi > lo:
            total += hi - lo
    return total


def segments(d: Path) -> list[Path]:
    return sorted(d.glob("seg-*.log"))


def test_always_appends_land_in_written_blocks(tmp_path: Path) -> None:
    span = ZERO_AHEAD // 2  # well inside the first stretch
    with Log.open(tmp_path / "never", segment_size=8 * ZERO_AHEAD, durability="never") as log:
        log.append(b"x")
        log.sync()
        control = unwritten_bytes(segments(tmp_path / "never")[0], 4096, span)
    if not control:
        pytest.skip("this file system leaves no unwritten extents after posix_fallocate")
    with Log.open(tmp_path / "always", segment_size=8 * ZERO_AHEAD, durability="always") as log:
        log.append(b"x")
        assert unwritten_bytes(segments(tmp_path / "always")[0], 4096, span) == 0
        log.append_many([b"y" * 1000] * (ZERO_AHEAD // 1000))  # past the first stretch
        end = log._writer.active.pos  # type: ignore[union-attr]
        assert unwritten_bytes(segments(tmp_path / "always")[0], 4096, end + span - 4096) == 0


def test_records_across_stretches_and_reopens_read_back(tmp_path: Path) -> None:
    payloads = [b"%d:" % i + b"." * (i % 700) for i in range(6000)]  # about 2.2 stretches
    with Log.open(tmp_path, segment_size=4 * ZERO_AHEAD, durability="always") as log:
        for p in payloads[:2500]:
            log.append(p)
    with Log.open(tmp_path, segment_size=4 * ZERO_AHEAD, durability="always") as log:  # resumes mid-stretch
        log.append_many(payloads[2500:4000])
        for p in payloads[4000:]:
            log.append(p)
    with LogReader(tmp_path) as reader:
        assert [bytes(f.payload) for f in reader.read(0)] == payloads


@pytest.mark.parametrize("single", [True, False])
def test_failed_zeroing_refuses_the_append_only(tmp_path: Path, single: bool) -> None:
    fs = Faults()
    with Log.open(tmp_path, segment_size=4 * ZERO_AHEAD, durability="always", fs=fs) as log:
        first = log.append(b"first")  # zeroes the first stretch
        log.append_many([b"z" * 1000] * ((ZERO_AHEAD - 8192) // 1032))  # up to 8 KiB short of its end
        fs.fail("pwrite", errno.EIO, match="seg-", times=1)
        with pytest.raises(LogError):
            if single:
                log.append(b"r" * 20000)  # reaches past the zeroed stretch
            else:
                log.append_many([b"r" * 20000])
        assert fs.failures == {"pwrite": 1}
        after = log.append(b"after")  # the next stretch is zeroed now
    with LogReader(tmp_path) as reader:
        got = [(f.offset, bytes(f.payload)) for f in reader.read(0)]
    assert got[0] == (first, b"first") and got[-1] == (after, b"after")
    assert [o for o, _ in got] == list(range(after + 1)) and b"r" * 20000 not in [p for _, p in got]
