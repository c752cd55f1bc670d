"""Frame encoding: the unit written to a segment (stalkd's on-disk record envelope).

Layout (little-endian), 24-byte header then payload, padded with zeros to a multiple of 8::

    u32 crc32c | u8 magic (0xA7) | u8 flags | u16 epoch | u32 length | u32 delta | i64 timestamp_us

``crc32c`` covers everything after it: the other 20 header bytes, the payload and the padding,
so one checksum call over one contiguous range checks a frame, and no byte of it goes unchecked.
``flags``: bit 7 = committed, low bits = kind (0 data, 1 padding, 2 footer; unknown kinds are
skipped by readers so the format can grow). ``delta`` is the frame's logical offset minus the
segment's base offset (data frames only), so a stale frame left behind a torn one can never be
taken for the record expected at that place. ``epoch`` is the segment's writer epoch (see
:mod:`stalkd.log.segment`). A length of 0 is a legal payload; a zero magic byte marks the end of
written data.

Checking is written once too: :func:`scan_positions` walks a region frame by frame (CRC,
magic, delta, epoch, torn tail) in one tight loop and returns where the valid data frames lie;
:func:`scan` (frames one at a time), :func:`data_payloads` (a standby's frames message) and the
columnar reads of :mod:`stalkd.log.columns` are built on it.

Ensures: ``encode_frame`` output length is ``frame_size(len(payload))`` and a multiple of 8;
``scan`` yields exactly the valid data frames of a region, in offset order, and stops at the
first frame that is torn, fails its CRC, has the wrong delta or a stale epoch.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, TypeVar

from stalkd.extensions import compiled_module
from stalkd.log.crc import crc32c

__all__ = [
    "Frame",
    "FRAME_HEADER_SIZE",
    "MAGIC",
    "KIND_DATA",
    "KIND_PADDING",
    "KIND_FOOTER",
    "FLAG_COMMITTED",
    "frame_size",
    "encode_frame",
    "encode_data_frame",
    "encode_data_frames",
    "py_encode_data_frames",
    "put_data_frame",
    "HEAD",
    "HEAD_FIELDS",
    "FLAGS_AT",
    "LENGTH_AT",
    "TIMESTAMP_AT",
    "REST",
    "ScanState",
    "scan",
    "scan_positions",
    "data_payloads",
]

MAGIC = 0xA7
FLAG_COMMITTED = 0x80
KIND_MASK = 0x7F
KIND_DATA = 0
KIND_PADDING = 1
KIND_FOOTER = 2
# The header, field by field (name, struct code); structs and bulk readers' numpy dtypes derive from it.
HEAD_FIELDS = (
    ("crc", "I"), ("magic", "B"), ("flags", "B"), ("epoch", "H"), ("length", "I"), ("delta", "I"),
    ("timestamp_us", "q"),
)  # fmt: skip
HEAD = struct.Struct("<" + "".join(code for _, code in HEAD_FIELDS))  # the whole header: 24 bytes
REST = struct.Struct("<" + "".join(code for _, code in HEAD_FIELDS[1:]))  # after the CRC: 20 bytes
FRAME_HEADER_SIZE = HEAD.size
FLAGS_AT = struct.calcsize("<IB")  # byte offset of ``flags`` in the header
LENGTH_AT = struct.calcsize("<IBBH")  # byte offset of ``length`` in the header
TIMESTAMP_AT = struct.calcsize("<IBBHII")  # byte offset of ``timestamp_us``
MAX_PAYLOAD = 2**32 - 1
_PADS = tuple(bytes(i) for i in range(8))  # the zero padding of each length modulo 8
_pack_rest = REST.pack
_pack_u32 = struct.Struct("<I").pack
_LENGTH = struct.Struct("<I")
_ZERO_HEAD = bytes(FRAME_HEADER_SIZE)
T = TypeVar("T")


def frame_size(length: int) -> int:
    """Bytes a frame with a payload of ``length`` bytes takes on disk.

    >>> frame_size(0), frame_size(1), frame_size(8)
    (24, 32, 32)
    """
    return (FRAME_HEADER_SIZE + length + 7) & ~7


def encode_frame(
    payload: bytes | bytearray | memoryview, delta: int, timestamp_us: int, epoch: int, kind: int = KIND_DATA
) -> bytes:
    """The on-disk bytes of one frame of any kind.

    >>> len(encode_frame(b"abc", 0, 1, 1))
    32
    """
    return b"".join(_frame_parts(payload, delta, timestamp_us, epoch, kind))


def _frame_parts(
    payload: bytes | bytearray | memoryview, delta: int, timestamp_us: int, epoch: int, kind: int
) -> tuple[bytes, bytes, bytes | bytearray | memoryview, bytes]:
    """A frame's four pieces (CRC, the rest of the header, payload, padding), for one join: the
    CRC is chained over the pieces so the payload is copied once, into the joined frame."""
    n = len(payload)
    rest = _pack_rest(MAGIC, FLAG_COMMITTED | kind, epoch, n, delta, timestamp_us)
    pad = _PADS[-(FRAME_HEADER_SIZE + n) & 7]
    crc = crc32c(payload, crc32c(rest))
    return _pack_u32(crc32c(pad, crc) if pad else crc), rest, payload, pad


def encode_data_frame(payload: bytes | bytearray | memoryview, delta: int, timestamp_us: int, epoch: int) -> bytes:
    """``encode_frame`` of a data frame (the writer's per-record hot path; by the C leaf of
    ``encode_data_frames`` where it is built).

    >>> encode_data_frame(b"abc", 4, 9, 2) == encode_frame(b"abc", 4, 9, 2)
    True
    """
    if _c_frames is not None:
        return _c_frames((payload,), delta, timestamp_us, epoch)  # type: ignore[no-any-return]
    return encode_frame(payload, delta, timestamp_us, epoch, KIND_DATA)


def put_data_frame(
    buf: bytearray | memoryview | mmap.mmap,
    pos: int,
    room: int,
    payload: bytes | bytearray | memoryview,
    delta: int,
    timestamp_us: int,
    epoch: int,
) -> int:
    """Write ``encode_data_frame(payload, delta, timestamp_us, epoch)`` into ``buf`` at ``pos``
    if it ends by ``room``: its end, or -1 (nothing written) if it does not fit.

    >>> buf = bytearray(64)
    >>> put_data_frame(buf, 8, 64, b"abc", 4, 9, 2), bytes(buf[8:40]) == encode_data_frame(b"abc", 4, 9, 2)
    (40, True)
    >>> put_data_frame(buf, 40, 64, b"abc", 4, 9, 2)
    -1
    """
    end = pos + frame_size(len(payload))
    if end > room:
        return -1
    buf[pos:end] = encode_data_frame(payload, delta, timestamp_us, epoch)
    return end


def encode_data_frames(
    payloads: Sequence[bytes | bytearray | memoryview], first_delta: int, timestamp_us: int, epoch: int
) -> bytes:
    """Consecutive data frames (deltas ``first_delta``, ``first_delta + 1``, ...) in one buffer:
    ``py_encode_data_frames``, by the C leaf ``_framer`` where it is built (a frame's header,
    payload copy and CRC-32C in a few hundred instructions rather than a few thousand).

    >>> encode_data_frames([b"a", b"bc"], 3, 9, 1) == encode_frame(b"a", 3, 9, 1) + encode_frame(b"bc", 4, 9, 1)
    True
    """
    if _c_frames is not None:
        return _c_frames(payloads, first_delta, timestamp_us, epoch)  # type: ignore[no-any-return]
    return py_encode_data_frames(payloads, first_delta, timestamp_us, epoch)


def py_encode_data_frames(
    payloads: Sequence[bytes | bytearray | memoryview], first_delta: int, timestamp_us: int, epoch: int
) -> bytes:
    """What ``encode_data_frames`` returns, in Python: the rule, and the fallback without the leaf.

    >>> py_encode_data_frames([b"a", b"bc"], 3, 9, 1) == encode_data_frames([b"a", b"bc"], 3, 9, 1)
    True
    """
    parts: list[bytes | bytearray | memoryview] = []
    for i, p in enumerate(payloads):
        parts.extend(_frame_parts(p, first_delta + i, timestamp_us, epoch, KIND_DATA))
    return b"".join(parts)  # each payload copied once, into the batch


# The C leaf behind encode_data_frames, or None: not built, switched off (STALKD_NO_EXTENSIONS=1),
# or a CPU without the CRC-32C instruction (it refuses to import).
_framer = compiled_module("stalkd.log._framer")
_c_frames = None if _framer is None else _framer.encode_data_frames


class Frame(NamedTuple):
    """One record read back from the log.

    ``payload`` is a zero-copy view into the segment's mapping; call :meth:`bytes` to keep a copy.

    >>> Frame(3, 1700000000000000, memoryview(b"hi")).bytes()
    b'hi'
    """

    offset: int
    timestamp_us: int
    payload: memoryview

    def bytes(self) -> bytes:
        """A copy of the payload that outlives the segment mapping."""
        return bytes(self.payload)


class ScanState:
    """Where a scan stopped: ``pos`` (next byte), ``offset`` (next logical offset), ``status``.

    ``status`` is "end" (zeros: clean end of data), "bad" (torn frame, bad CRC, wrong delta or
    epoch), "footer" (reached the seal), "limit" (stopped by the caller's bounds) or "" while running.
    """

    __slots__ = ("pos", "offset", "status", "epoch")

    def __init__(self, pos: int, offset: int) -> None:
        self.pos = pos
        self.offset = offset
        self.status = ""
        self.epoch = 0


def _off_fast_path(
    mv: memoryview, pos: int, stop_pos: int, epoch_limit: int, last_epoch: int
) -> tuple[str, int, int]:
    """The decision for a frame the scans' fast path did not take (it is not a good data frame
    with the expected delta): ("end" | "bad" | "footer", pos, epoch) to stop there, or ("",
    next position, its epoch) to step over a padding frame or one of a kind not known here."""
    if pos + FRAME_HEADER_SIZE > stop_pos:
        return ("end" if pos >= stop_pos or not any(mv[pos:stop_pos]) else "bad"), pos, last_epoch
    crc, magic, flags, epoch, length, _delta, _ts = HEAD.unpack_from(mv, pos)
    if magic != MAGIC:
        return ("end" if mv[pos : pos + FRAME_HEADER_SIZE] == _ZERO_HEAD else "bad"), pos, last_epoch
    nxt = (pos + FRAME_HEADER_SIZE + length + 7) & ~7
    if nxt > stop_pos or epoch > epoch_limit or epoch < last_epoch or crc != crc32c(mv[pos + 4 : nxt]):
        return "bad", pos, last_epoch
    kind = flags & KIND_MASK
    if kind == KIND_DATA:  # a valid data frame off the fast path: its delta is wrong
        return "bad", pos, last_epoch
    if kind == KIND_FOOTER:
        return "footer", pos, last_epoch
    return "", nxt, epoch  # padding or a kind this version does not know: skippable


# The two scans below share their checks: the fast path is the same condition in both (a good
# data frame with the expected delta), everything else goes to ``_off_fast_path``. They stay two
# loops because a generator built on the list-returning one costs about a third more per frame.


def scan_positions(
    mv: memoryview,
    base: int,
    epoch_limit: int,
    state: ScanState,
    stop_pos: int,
    stop_offset: int | None,
    skip_before: int,
    max_rows: int,
) -> list[int]:
    """Byte positions of up to ``max_rows`` valid data frames from ``state.pos`` (those with an
    offset below ``skip_before`` are checked, not listed); ``state`` is left after the last.

    The frames listed have consecutive offsets ending at ``state.offset``. ``state.status`` is
    "limit" when ``stop_offset`` or ``max_rows`` stopped the walk (call again for more), else
    as in :func:`scan`. ``base`` is the first offset of the segment the region belongs to.
    """
    head_unpack = HEAD.unpack_from
    pos, last_epoch = state.pos, state.epoch
    # Counted as deltas from the base (what a data frame carries), so the check is one compare.
    d = state.offset - base
    first = max(state.offset, skip_before)
    # Offsets are dense, so a row limit is an offset limit.
    limit = (first + max_rows if stop_offset is None else min(stop_offset, first + max_rows)) - base
    skip = skip_before - base
    positions: list[int] = []
    add = positions.append
    while True:
        if d >= limit:
            status = "limit"
            break
        if pos + FRAME_HEADER_SIZE <= stop_pos:
            crc, magic, flags, epoch, length, delta, _ts = head_unpack(mv, pos)
            nxt = (pos + FRAME_HEADER_SIZE + length + 7) & ~7
            if (delta == d and magic == MAGIC and not flags & KIND_MASK and last_epoch <= epoch <= epoch_limit
                    and nxt <= stop_pos and crc == crc32c(mv[pos + 4 : nxt])):  # fmt: skip
                if d >= skip:
                    add(pos)
                last_epoch = epoch
                pos = nxt
                d += 1
                continue
        status, pos, last_epoch = _off_fast_path(mv, pos, stop_pos, epoch_limit, last_epoch)
        if status:
            break
    state.pos, state.offset, state.epoch, state.status = pos, base + d, last_epoch, status
    return positions


def scan(
    mv: memoryview,
    base: int,
    epoch_limit: int,
    state: ScanState,
    stop_pos: int,
    stop_offset: int | None = None,
    skip_before: int = 0,
    make: Callable[[int, int, memoryview], T] = Frame,  # type: ignore[assignment]
) -> Iterator[T]:
    """Yield valid data frames from ``state.pos``; ``state`` is updated before each yield.

    Frames with an offset below ``skip_before`` are checked but not yielded. ``make(offset,
    timestamp_us, payload)`` builds what is yielded (a Frame by default). ``state.status`` ends
    as "end" (zeros: clean end of data), "bad", "footer" or "limit" (``stop_offset`` reached).

    >>> buf = memoryview(encode_data_frames([b"a", b"bc"], 0, 7, 1) + bytes(24))
    >>> [(f.offset, f.bytes()) for f in scan(buf, 10, 1, ScanState(0, 10), len(buf))]
    [(10, b'a'), (11, b'bc')]
    """
    head_unpack = HEAD.unpack_from
    pos, last_epoch = state.pos, state.epoch
    d = state.offset - base
    limit = (2**64 if stop_offset is None else stop_offset) - base
    skip = skip_before - base
    while True:
        if d >= limit:
            status = "limit"
            break
        if pos + FRAME_HEADER_SIZE <= stop_pos:
            crc, magic, flags, epoch, length, delta, ts = head_unpack(mv, pos)
            body = pos + FRAME_HEADER_SIZE
            nxt = (body + length + 7) & ~7
            if (delta == d and magic == MAGIC and not flags & KIND_MASK and last_epoch <= epoch <= epoch_limit
                    and nxt <= stop_pos and crc == crc32c(mv[pos + 4 : nxt])):  # fmt: skip
                last_epoch = epoch
                pos = nxt
                d += 1
                if d > skip:
                    state.pos, state.offset, state.epoch = pos, base + d, epoch
                    yield make(base + d - 1, ts, mv[body : body + length])
                continue
        status, pos, last_epoch = _off_fast_path(mv, pos, stop_pos, epoch_limit, last_epoch)
        if status:
            break
    state.pos, state.offset, state.epoch, state.status = pos, base + d, last_epoch, status


def data_payloads(
    mv: bytes | memoryview, pos: int, end: int, base: int, offset: int, epoch_limit: int
) -> list[bytes] | None:
    """The payloads (copies) of the data frames that fill ``mv[pos:end]`` exactly, with offsets
    ``offset``, ``offset + 1``... in a segment based at ``base``, each checked as a reader of
    that segment would (:func:`scan_positions`, writer epochs from 0 up to ``epoch_limit``);
    None if anything else is there (a frame that fails its checks, a torn tail, zeros): a
    standby's frames message.

    >>> buf = encode_data_frames([b"a", b"bc"], 3, 9, 1)
    >>> data_payloads(buf, 0, len(buf), 10, 13, 1), data_payloads(buf, 0, len(buf), 10, 14, 1)
    ([b'a', b'bc'], None)
    >>> data_payloads(buf + bytes(24), 0, len(buf) + 24, 10, 13, 1)
    """
    st = ScanState(pos, offset)
    view = memoryview(mv)
    positions = scan_positions(view, base, epoch_limit, st, end, None, 0, (end - pos) // FRAME_HEADER_SIZE + 1)
    if st.status != "end" or st.pos != end:
        return None
    # One copy of the region, then a bytes slice per payload (not a view and a copy of it).
    raw = bytes(view[:end])
    unpack = _LENGTH.unpack_from
    h = FRAME_HEADER_SIZE
    return [raw[p + h : p + h + unpack(raw, p + LENGTH_AT)[0]] for p in positions]
