"""Segment files: naming, the versioned header, the footer of a sealed segment, and frame scans.

A segment is ``seg-<base offset, 20 digits>.log``, preallocated to its full size when created so
that appends never need new blocks (a full disk fails the allocation, before anything is written).

Header (64 bytes, little-endian)::

    8s magic "STALKLOG" | u16 version (1) | u16 epoch | u32 flags (0) | u64 base_offset
    | i64 created_us | u32 crc32c of the previous 32 bytes | zeros

The epoch is raised each time a writer opens the log (the header is rewritten in place). Frames
carry the epoch they were written under, and a scan accepts only non-decreasing epochs not above
the header's: frames left past a torn tail by an earlier writer can never reappear behind the new
writer's frames, without zeroing megabytes on recovery.

A sealed segment ends with a footer frame (kind 2) in its last 48 bytes whose payload is
``u64 end_offset | u64 data_end | u64 count``; opening a log reads only that footer for sealed
segments, so recovery scans the active segment alone.

Ensures: a segment's frames are checked by :mod:`stalkd.log.frame`'s scan, which stops at the
first frame that is torn, fails its CRC, has the wrong delta or a stale epoch.

How to change the format (numbered; append to it):
  1. Bump ``VERSION`` for any header or frame layout change; keep a reader for every old version
     and a test file per version (tests/log/test_format_v1.py freezes version 1 as hex).
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Callable, Iterator

from stalkd.log.crc import crc32c
from stalkd.values import Value

from .errors import LogCorruptError
from .frame import (
    FRAME_HEADER_SIZE,
    HEAD,
    KIND_FOOTER,
    KIND_MASK,
    MAGIC,
    Frame,
    ScanState,
    encode_frame,
    scan,
)
from .fs import REAL

__all__ = ["SegmentInfo", "SegmentView", "ScanState", "scan", "segment_name", "parse_segment_name", "repair_hint"]

SEG_MAGIC = b"STALKLOG"
VERSION = 1
HEADER = struct.Struct("<8sHHIQq")  # 32 bytes, then u32 crc
HEADER_SIZE = 64
FOOTER_PAYLOAD = struct.Struct("<QQQ")
FOOTER_SIZE = FRAME_HEADER_SIZE + FOOTER_PAYLOAD.size  # 48, a multiple of 8
MAX_EPOCH = 0xFFFF
_U32 = struct.Struct("<I")
_NAME = re.compile(r"^seg-(\d{20})\.log$")


def segment_name(base: int) -> str:
    """File name of the segment starting at ``base``.

    >>> segment_name(42)
    'seg-00000000000000000042.log'
    """
    return f"seg-{base:020d}.log"


def parse_segment_name(name: str) -> int | None:
    """Base offset encoded in a segment file name, or None for any other file."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


def repair_hint(path: str) -> str:
    """The command that cuts the log holding segment ``path`` at its damage (for error messages).

    >>> repair_hint("/data/wal/seg-00000000000000000000.log")
    'stalkd log repair /data/wal'
    """
    root = os.path.dirname(path)
    if os.path.basename(root) == "archive":
        root = os.path.dirname(root)
    return f"stalkd log repair {root or '.'}"


def encode_header(base: int, epoch: int, created_us: int) -> bytes:
    head = HEADER.pack(SEG_MAGIC, VERSION, epoch, 0, base, created_us)
    return (head + _U32.pack(crc32c(head))).ljust(HEADER_SIZE, b"\0")


def decode_header(buf: bytes | memoryview, path: str) -> tuple[int, int]:
    """(base_offset, epoch) of a segment header; LogCorruptError if it is not a valid header."""
    if len(buf) < HEADER_SIZE:
        raise LogCorruptError(f"{path}: file too short for a segment header", path=path, position=0, offset=None)
    magic, version, epoch, _flags, base, _created = HEADER.unpack_from(buf, 0)
    (crc,) = _U32.unpack_from(buf, HEADER.size)
    if magic != SEG_MAGIC or crc != crc32c(bytes(buf[: HEADER.size])):
        raise LogCorruptError(f"{path}: bad segment header (magic or CRC)", path=path, position=0, offset=None)
    if version != VERSION:
        raise LogCorruptError(
            f"{path}: segment format version {version} is not known to this build (knows {VERSION})",
            path=path,
            position=0,
            offset=None,
        )
    return int(base), int(epoch)


def encode_footer(base: int, end_offset: int, data_end: int, epoch: int) -> bytes:
    payload = FOOTER_PAYLOAD.pack(end_offset, data_end, end_offset - base)
    return encode_frame(payload, end_offset - base, 0, epoch, KIND_FOOTER)


class SegmentInfo(Value):
    """What a directory listing knows about one segment file.

    ``end_offset`` is exclusive, None when unknown (an active segment not scanned).

    >>> SegmentInfo("d/seg-00000000000000000000.log", 0, 10, True, False, 4096).end_offset
    10
    """

    __slots__ = ("path", "base_offset", "end_offset", "sealed", "archived", "size")
    path: str
    base_offset: int
    end_offset: int | None
    sealed: bool
    archived: bool
    size: int

    def __init__(self, path: str, base_offset: int, end_offset: int | None, sealed: bool, archived: bool,
                 size: int) -> None:  # fmt: skip
        self.path = path
        self.base_offset = base_offset
        self.end_offset = end_offset
        self.sealed = sealed
        self.archived = archived
        self.size = size


class SegmentView:
    """A read-only mapping of one segment file; never takes the writer lock.

    >>> import tempfile
    >>> from stalkd.log import Log
    >>> with Log.open(tempfile.mkdtemp(), durability="never") as log:
    ...     _ = log.append_many([b"a", b"b", b"c"])
    ...     view = SegmentView(log.segment_bounds()[0][2])
    >>> [f.offset for f in view.frames(1, 10)]
    [1, 2]
    """

    def __init__(self, path: str, archived: bool = False) -> None:
        self.path = path
        self.archived = archived
        fd = REAL.open_read(path)
        try:
            self.size = os.fstat(fd).st_size
            if self.size < HEADER_SIZE + FOOTER_SIZE:
                raise LogCorruptError(f"{path}: {self.size} bytes is too short for a segment", path=path, position=0, offset=None)
            self._mm = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.mv = memoryview(self._mm)
        self.base, _ = decode_header(self.mv, path)
        name_base = parse_segment_name(os.path.basename(path))
        if name_base is not None and name_base != self.base:
            raise LogCorruptError(
                f"{path}: header says base offset {self.base}, file name says {name_base}",
                path=path,
                position=0,
                offset=None,
            )
        self.footer = self.read_footer()

    @property
    def epoch(self) -> int:
        """The header's current epoch (re-read: a writer raises it when it opens the log)."""
        return int(HEADER.unpack_from(self.mv, 0)[2])

    def read_footer(self) -> tuple[int, int] | None:
        """(end_offset, data_end) from a valid footer, or None if the segment is not sealed."""
        fpos = self.size - FOOTER_SIZE
        crc, magic, flags, epoch, length, delta, _ts = HEAD.unpack_from(self.mv, fpos)
        if magic != MAGIC or flags & KIND_MASK != KIND_FOOTER or length != FOOTER_PAYLOAD.size:
            return None
        body = fpos + FRAME_HEADER_SIZE
        if crc != crc32c(self.mv[fpos + 4 : self.size]):
            return None
        end, data_end, count = FOOTER_PAYLOAD.unpack_from(self.mv, body)
        if count != end - self.base or delta != count or not HEADER_SIZE <= data_end <= fpos:
            return None
        return int(end), int(data_end)

    def frames(
        self,
        start: int,
        end: int | None = None,
        hint: tuple[int, int] | None = None,
        state: ScanState | None = None,
        make: Callable[[int, int, memoryview], object] = Frame,
    ) -> Iterator[Frame]:
        """Data frames with ``start <= offset < end``, checked; a bad frame in a sealed segment raises.

        ``hint`` is a known (offset, position) at or before ``start`` in this segment (e.g. a
        cursor's saved position), so the scan need not start at the segment's first frame.
        """
        st = state if state is not None else ScanState(HEADER_SIZE, self.base)
        st.pos, st.offset, st.epoch, st.status = HEADER_SIZE, self.base, 0, ""
        if hint is not None and self.base <= hint[0] <= start and HEADER_SIZE <= hint[1] < self.size:
            st.offset, st.pos = hint
        sealed_end, stop_pos, stop_offset = self.bounds(end)
        yield from scan(self.mv, self.base, self.epoch, st, stop_pos, stop_offset, start, make)  # type: ignore[misc]
        self.check_complete(st, sealed_end)

    def bounds(self, end: int | None) -> tuple[tuple[int, int] | None, int, int | None]:
        """(footer's (end offset, data end) or None, byte and offset where a scan up to ``end``
        stops). A sealed segment stops at its footer's end, an unsealed one at its file's end
        (the footer room is zeros)."""
        if self.footer is None:
            self.footer = self.read_footer()  # a writer may have sealed it since we mapped it
        sealed_end = self.footer
        stop_pos = sealed_end[1] if sealed_end else self.size
        stop_offset = end if sealed_end is None or end is None else min(end, sealed_end[0])
        if sealed_end and stop_offset is None:
            stop_offset = sealed_end[0]
        return sealed_end, stop_pos, stop_offset

    def check_complete(self, st: ScanState, sealed_end: tuple[int, int] | None) -> None:
        """LogCorruptError if a scan of a sealed segment stopped short of its footer's end."""
        if sealed_end is not None and st.status != "limit" and st.offset < sealed_end[0]:
            raise LogCorruptError(
                f"{self.path}: bad frame at byte {st.pos} (offset {st.offset}) inside a sealed segment "
                f"that should hold offsets {self.base}..{sealed_end[0] - 1}; to cut the log there (the "
                f"dropped bytes are kept), run: {repair_hint(self.path)}",
                path=self.path,
                position=st.pos,
                offset=st.offset,
            )

    def find_frames(self, start: int, stop: int, min_offset: int) -> list[tuple[int, int, bytes]]:
        """Valid data frames anywhere in bytes ``[start, stop)`` with an offset of at least
        ``min_offset``, as (offset, position, payload copy): what lies beyond a bad frame, found by
        searching for frame headers (8-byte aligned) rather than by walking from it."""
        out: list[tuple[int, int, bytes]] = []
        mm, mv, base, limit = self._mm, self.mv, self.base, self.epoch
        magic = bytes([MAGIC])
        at = start + 4  # the magic byte follows a frame's CRC
        while True:
            hit = mm.find(magic, at, stop)
            if hit < 0:
                return out
            pos = hit - 4
            at = hit + 1
            if pos % 8 or pos + FRAME_HEADER_SIZE > stop:
                continue
            delta = HEAD.unpack_from(mv, pos)[5]
            if base + delta < min_offset:
                continue
            st = ScanState(pos, base + delta)
            f: Frame
            for f in scan(mv, base, limit, st, stop):
                out.append((f.offset, st.pos - ((FRAME_HEADER_SIZE + len(f.payload) + 7) & ~7), f.bytes()))
            if st.pos > pos:
                at = st.pos + 4

    def close(self) -> None:
        """Release the mapping unless frames handed out still reference it (then GC frees it)."""
        try:
            self.mv.release()
            self._mm.close()
        except BufferError:
            pass
