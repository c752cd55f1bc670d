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

import array
import mmap
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

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
    "frames_size",
    "crc32c_tables",
    "encode_frame",
    "encode_data_frame",
    "encode_data_frames",
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
    "CRC_INSTRUCTION",
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
MAX_PAYLOAD = 2**32 - 1
_LENGTH = struct.Struct("<I")
_ZERO_HEAD = bytes(FRAME_HEADER_SIZE)


def _place(name: str) -> tuple[int, int]:
    """Header field ``name``'s (byte offset, width), from HEAD_FIELDS."""
    names = [n for n, _ in HEAD_FIELDS]
    before = "".join(code for _, code in HEAD_FIELDS[: names.index(name)])
    return struct.calcsize("<" + before), struct.calcsize("<" + HEAD_FIELDS[names.index(name)][1])


FLAGS_AT = _place("flags")[0]  # byte offset of ``flags`` in the header
LENGTH_AT = _place("length")[0]  # byte offset of ``length`` in the header
TIMESTAMP_AT = _place("timestamp_us")[0]  # byte offset of ``timestamp_us``


# What the encoder reads per frame, C values when compiled (frame.pxd), each otherwise a module
# look-up and Python arithmetic: the header's size and fields' places, the largest payload.
_HEADER_LEN, _LARGEST, _DATA_FLAGS = FRAME_HEADER_SIZE, MAX_PAYLOAD, FLAG_COMMITTED | KIND_DATA
# From this payload length on, the compiled encoder copies by memcpy and sums by the crc32c
# package's CPU instruction: each costs ~1,500 instructions a call, less than the C loops' ~4 a byte
# (callgrind: a 4 KiB frame 47,000 instructions by the loops, 4,900 by the C leaf that was).
_LONG = 512
_CRC_AT, _CRC_W = _place("crc")
_MAGIC_AT, _MAGIC_W = _place("magic")
_FLAGS_AT, _FLAGS_W = _place("flags")
_EPOCH_AT, _EPOCH_W = _place("epoch")
_LENGTH_AT, _LENGTH_W = _place("length")
_DELTA_AT, _DELTA_W = _place("delta")
_TS_AT, _TS_W = _place("timestamp_us")
_MAGIC_B, _KIND_B = MAGIC, KIND_MASK
_D_MAX = 2**62  # the deltas a scan's C loop compares stay within +-this (compiled: a C integer)
if (_LENGTH_W, _EPOCH_W, _DELTA_W, _CRC_W) != (4, 2, 4, 4):  # pragma: no cover - a format change
    raise ImportError("log/frame.py's _good_run reads an older header layout than HEAD_FIELDS")
_pack_rest_into = REST.pack_into
_pack_crc_into = struct.Struct("<" + HEAD_FIELDS[0][1]).pack_into
T = TypeVar("T")


def frame_size(length: int) -> int:
    """Bytes a frame with a payload of ``length`` bytes takes on disk.

    >>> frame_size(0), frame_size(1), frame_size(8)
    (24, 32, 32)
    """
    return (_HEADER_LEN + length + 7) & ~7


@cython.locals(total=cython.Py_ssize_t, n=cython.Py_ssize_t)
def frames_size(payloads: Sequence[bytes | bytearray | memoryview]) -> int:
    """Bytes the frames of ``payloads`` take on disk; ValueError if one is larger than a frame
    can hold.

    >>> frames_size([b"", b"abc"])
    56
    """
    total = 0
    for p in payloads:
        n = len(p)
        if n > _LARGEST:
            raise ValueError(f"a payload of {n} bytes is larger than {MAX_PAYLOAD}, the frame limit")
        total += frame_size(n)
    return total


def encode_frame(
    payload: bytes | bytearray | memoryview, delta: int, timestamp_us: int, epoch: int, kind: int = KIND_DATA
) -> bytes:
    """The on-disk bytes of one frame of any kind.

    >>> len(encode_frame(b"abc", 0, 1, 1))
    32
    """
    return bytes(_encode((payload,), delta, timestamp_us, epoch, FLAG_COMMITTED | kind))


def encode_data_frame(
    payload: bytes | bytearray | memoryview, delta: int, timestamp_us: int, epoch: int
) -> bytearray:
    """``encode_frame`` of a data frame (the writer's per-record path without a mapping).

    >>> encode_data_frame(b"abc", 4, 9, 2) == encode_frame(b"abc", 4, 9, 2)
    True
    """
    return _encode((payload,), delta, timestamp_us, epoch, _DATA_FLAGS)


def encode_data_frames(
    payloads: Sequence[bytes | bytearray | memoryview], first_delta: int, timestamp_us: int, epoch: int
) -> bytearray:
    """Consecutive data frames (deltas ``first_delta``, ``first_delta + 1``, ...) in one new
    buffer, the writer's batch: each payload copied once, into it.

    >>> encode_data_frames([b"a", b"bc"], 3, 9, 1) == encode_frame(b"a", 3, 9, 1) + encode_frame(b"bc", 4, 9, 1)
    True
    """
    return _encode(payloads, first_delta, timestamp_us, epoch, _DATA_FLAGS)


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
    buf[pos:end] = _encode((payload,), delta, timestamp_us, epoch, _DATA_FLAGS)
    return end


@cython.locals(total=cython.Py_ssize_t, pos=cython.Py_ssize_t, n=cython.Py_ssize_t, at=cython.Py_ssize_t,
               end=cython.Py_ssize_t, count=cython.Py_ssize_t, out=bytearray, delta=cython.longlong,
               ts=cython.longlong, ep=cython.longlong)  # fmt: skip
def _encode(
    payloads: Sequence[bytes | bytearray | memoryview], first_delta: int, timestamp_us: int, epoch: int, flags: int
) -> bytearray:
    """The rule of writing frames: consecutive frames (deltas from ``first_delta``), each its
    header after the CRC, its payload, its zero padding, then the CRC over all of that.

    A payload past the frame limit is refused with ``ValueError`` (``frames_size``), a field the
    format cannot hold (a delta past u32, an epoch past u16, a timestamp past i64) with
    ``OverflowError``, before anything is written."""
    total = frames_size(payloads)
    count = len(payloads)
    if not cython.compiled and not -(2**63) <= timestamp_us < 2**63:  # compiled: refused by its C type
        raise OverflowError("a frame's timestamp is out of the format's range")
    delta, ts, ep = first_delta, timestamp_us, epoch
    if delta < 0 or delta + count > 0x100000000 or ep < 0 or ep > 0xFFFF:
        raise OverflowError("a frame's delta or epoch is out of the format's range")
    if cython.compiled:  # the frames' buffer, zeroed by C (not a bytearray multiplied: ~370 instructions)
        out = PyByteArray_FromStringAndSize(cython.NULL, total)
        memset(cython.cast(cython.p_char, out), 0, total)
    else:
        out = _ZERO * total  # the frames' buffer, all padding already zero
    pos = 0
    for p in payloads:
        n = len(p)
        at = pos + _HEADER_LEN
        end = (at + n + 7) & ~7
        if end > total:  # a payload grew between the two passes
            raise RuntimeError("a payload changed while it was framed")
        _put_header(out, pos, flags, ep, n, delta, ts)
        _put_payload(out, at, p, n)  # the padding after it is the buffer's zeros
        _put_crc(out, pos, end, p, n)
        pos = end
        delta += 1
    if pos != total:  # a payload shrank between the two passes
        raise RuntimeError("a payload changed while it was framed")
    return out


_ZERO = bytearray(1)


# The three steps of a frame. Compiled, each is C stores and loops; uncompiled, one struct call
# or slice each, cheaper in the interpreter than a byte at a time. Both builds are held to the
# same bytes by tests/log/test_frame_encoding.py.


@cython.cfunc
@cython.inline
@cython.locals(pos=cython.Py_ssize_t, flags=cython.uchar, epoch=cython.longlong, n=cython.Py_ssize_t,
               delta=cython.longlong, ts=cython.longlong)  # fmt: skip
def _put_header(out: bytearray, pos: int, flags: int, epoch: int, n: int, delta: int, ts: int) -> None:
    """The header after the CRC: magic, ``flags``, ``epoch``, length ``n``, ``delta``, ``ts``."""
    if cython.compiled:
        _store_le(out, pos + _MAGIC_AT, _MAGIC_B, _MAGIC_W)  # the C constant: no module look-up
        _store_le(out, pos + _FLAGS_AT, flags, _FLAGS_W)
        _store_le(out, pos + _EPOCH_AT, epoch, _EPOCH_W)
        _store_le(out, pos + _LENGTH_AT, n, _LENGTH_W)
        _store_le(out, pos + _DELTA_AT, delta, _DELTA_W)
        _store_le(out, pos + _TS_AT, ts, _TS_W)
    else:
        _pack_rest_into(out, pos + _MAGIC_AT, MAGIC, flags, epoch, n, delta, ts)


@cython.cfunc
@cython.inline
@cython.locals(at=cython.Py_ssize_t, n=cython.Py_ssize_t, b=cython.p_uchar, src=cython.p_uchar)
def _put_payload(out: bytearray, at: int, payload: bytes | bytearray | memoryview, n: int) -> None:
    """``out[at : at + n] = payload``; compiled, a bytes payload (what the writer hands it) is
    copied by libc's memcpy, without a slice object (callgrind, a 150-byte put record: ~600
    instructions by a C loop a byte at a time, ~40 by memcpy)."""
    if cython.compiled and type(payload) is bytes:
        b = cython.cast(cython.p_uchar, cython.cast(cython.p_char, out))
        src = cython.cast(cython.p_uchar, cython.cast(cython.p_char, payload))
        memcpy(cython.address(b[at]), src, n)
    else:
        out[at : at + n] = payload


@cython.cfunc
@cython.locals(pos=cython.Py_ssize_t, end=cython.Py_ssize_t, n=cython.Py_ssize_t, start=cython.Py_ssize_t,
               at=cython.Py_ssize_t, c=cython.uint, b=cython.p_uchar)  # fmt: skip
def _put_crc(out: bytearray, pos: int, end: int, payload: bytes | bytearray | memoryview, n: int) -> None:
    """The CRC-32C of the frame ``out[pos:end]`` (its payload ``payload``, ``n`` bytes) after its
    CRC field, stored in that field: the ``crc32c`` package's sum; compiled, the same sum by
    slicing-by-8 tables, with the package's (the CPU's instruction) over a long payload only (a
    call into it costs more than summing a short record)."""
    start = pos + _CRC_AT + _CRC_W
    if not cython.compiled:
        _pack_crc_into(out, pos + _CRC_AT, crc32c(memoryview(out)[start:end]))
        return
    b = cython.cast(cython.p_uchar, cython.cast(cython.p_char, out))
    if n < _LONG:
        c = _crc_update(0, b, start, end)
    else:
        at = pos + _HEADER_LEN
        c = _crc_update(crc32c(payload, _crc_update(0, b, start, at)), b, at + n, end)
    _store_le(out, pos + _CRC_AT, c, _CRC_W)


def _crc_update(crc: int, b: bytearray, i: int, end: int) -> int:
    """CRC-32C ``crc`` continued over the bytes ``b[i:end]`` (``b`` a C pointer): by the CPU's
    crc32 instruction where it has one (``_HW_CRC``), else by the tables; compiled only.

    The instruction takes 8 bytes a step, a load and the instruction, against ~30 instructions
    by the tables (callgrind: the CRCs of a 200k-job recovery, 150-byte records, 128M -> 18M)."""
    c = crc ^ _ONES
    if _HW_CRC:
        c64 = c
        v = 0
        while i + 8 <= end:
            memcpy(cython.address(v), cython.address(b[i]), 8)  # 8 bytes in CPU order (one load)
            c64 = _crc_u64(c64, v)
            i += 8
        c = cython.cast(cython.uint, c64)
        while i < end:
            c = _crc_u8(c, b[i])
            i += 1
        return c ^ _ONES
    t = cython.cast(cython.p_uint, cython.cast(cython.p_char, _CRC_TABLES))
    while i + 8 <= end:
        c ^= b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (cython.cast(cython.uint, b[i + 3]) << 24)
        hi = b[i + 4] | (b[i + 5] << 8) | (b[i + 6] << 16) | (cython.cast(cython.uint, b[i + 7]) << 24)
        c = (t[1792 + (c & 0xFF)] ^ t[1536 + ((c >> 8) & 0xFF)] ^ t[1280 + ((c >> 16) & 0xFF)] ^ t[1024 + (c >> 24)]
             ^ t[768 + (hi & 0xFF)] ^ t[512 + ((hi >> 8) & 0xFF)] ^ t[256 + ((hi >> 16) & 0xFF)] ^ t[hi >> 24])  # fmt: skip
        i += 8
    while i < end:
        c = t[(c ^ b[i]) & 0xFF] ^ (c >> 8)
        i += 1
    return c ^ _ONES


@cython.cfunc
@cython.inline
@cython.boundscheck(False)  # the caller checked the frame fits
@cython.wraparound(False)
@cython.locals(at=cython.Py_ssize_t, value=cython.longlong, width=cython.Py_ssize_t, k=cython.Py_ssize_t, out=bytearray)
def _store_le(out: bytearray, at: int, value: int, width: int) -> None:
    """``value``'s ``width`` low bytes, little-endian, at ``out[at]`` (compiled only)."""
    for k in range(width):
        out[at + k] = (value >> (8 * k)) & 0xFF


def crc32c_tables() -> bytes:
    """The eight 256-entry tables of CRC-32C (reflected polynomial 0x82F63B78) for slicing-by-8,
    as native 32-bit integers: table k gives a byte's contribution k bytes ahead of the end.
    The first 1,024 bytes (table 0) are the byte-at-a-time table (replication's wire takes it)."""
    first = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        first.append(c)
    tables = [first]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(v >> 8) ^ first[v & 0xFF] for v in prev])
    return array.array("I", [v for table in tables for v in table]).tobytes()


if not cython.compiled:  # compiled, frame.pxd takes these from C (the CPU's crc32 instruction)

    def _crc_insn() -> bool:
        return False

    def _crc_u64(crc: int, v: int) -> int:
        raise NotImplementedError("compiled only")

    def _crc_u8(crc: int, v: int) -> int:
        raise NotImplementedError("compiled only")

    def memcpy(to: object, source: object, n: int) -> None:
        raise NotImplementedError("compiled only")

    def memset(to: object, byte: int, n: int) -> None:
        raise NotImplementedError("compiled only")

    def PyByteArray_FromStringAndSize(s: object, n: int) -> bytearray:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")

    def _host_le() -> bool:
        return False


# Compiled, whether ``_crc_update`` sums by the CPU's crc32 instruction: asked of the CPU once
# (SSE4.2 on x86-64, where GCC builds the module; elsewhere never, and the tables serve). The
# ``crc32c`` package's switch to its software sum, CRC32C_SKIP_HW_PROBE=1, turns it off too (the
# tests run the tables so).
_HW_CRC = cython.compiled and _crc_insn() and os.environ.get("CRC32C_SKIP_HW_PROBE", "") != "1"
CRC_INSTRUCTION = bool(_HW_CRC)
"""Whether the compiled frame code sums CRCs by the CPU's instruction (not its tables)."""
# Built only where they are used: the compiled ``_crc_update`` without the instruction.
_CRC_TABLES = crc32c_tables() if cython.compiled and not _HW_CRC else b""
_ONES = 0xFFFFFFFF  # the CRC's pre- and post-inversion (compiled: a C constant, not a Python int per use)


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


@cython.boundscheck(False)  # every read is inside the region: pos + header <= nxt <= stop_pos <= len
@cython.wraparound(False)
def _good_run(
    mv: memoryview,
    pos: int,
    d: int,
    limit: int,
    skip: int,
    last_epoch: int,
    epoch_limit: int,
    stop_pos: int,
    positions: list[int],
) -> tuple[int, int, int]:
    """``scan_positions``' fast path compiled: from ``pos`` (delta ``d``), the good data frames
    in a row, each listed in ``positions`` from delta ``skip`` on, up to delta ``limit`` or the
    first frame off the fast path; returns (pos, d, epoch) after the last. Each header field is
    a C load from the region, and the CRC the tables' sum (the package's above ``_LONG`` bytes):
    no tuple, int or view per frame. Compiled only."""
    view = mv
    if stop_pos > len(view):
        stop_pos = len(view)
    if stop_pos <= 0:
        return pos, d, last_epoch
    p = cython.cast(cython.p_uchar, cython.address(view[0]))  # read only
    while d < limit and pos + _HEADER_LEN <= stop_pos:
        # The widths written as numbers (checked against HEAD_FIELDS where the module loads):
        # each read is one load.
        length = _load_le(p, pos + _LENGTH_AT, 4)
        nxt = (pos + _HEADER_LEN + length + 7) & ~7
        epoch = _load_le(p, pos + _EPOCH_AT, 2)
        if (cython.cast(cython.longlong, _load_le(p, pos + _DELTA_AT, 4)) != d or p[pos + _MAGIC_AT] != _MAGIC_B
                or p[pos + _FLAGS_AT] & _KIND_B or epoch < last_epoch or epoch > epoch_limit or nxt > stop_pos):  # fmt: skip
            break
        crc = _load_le(p, pos + _CRC_AT, 4)
        if length < _LONG:
            if crc != _crc_update(0, p, pos + _CRC_AT + _CRC_W, nxt):
                break
        elif crc != crc32c(mv[pos + _CRC_AT + _CRC_W : nxt]):
            break
        if d >= skip:
            positions.append(pos)
        last_epoch = epoch
        pos = nxt
        d += 1
    return pos, d, last_epoch


@cython.cfunc
@cython.inline
@cython.returns(cython.ulonglong)
@cython.locals(p=cython.p_uchar, at=cython.Py_ssize_t, width=cython.Py_ssize_t, k=cython.Py_ssize_t, v=cython.ulonglong)
def _load_le(p: bytes, at: int, width: int) -> int:
    """The unsigned little-endian integer of ``width`` bytes at ``p[at]`` (``p`` a C pointer;
    compiled only): on a little-endian CPU a copy of the bytes (for a constant ``width``, one
    load), else byte by byte."""
    v = 0
    if _host_le():
        memcpy(cython.address(v), cython.address(p[at]), width)
        return v
    for k in range(width):
        v |= cython.cast(cython.ulonglong, p[at + k]) << (8 * k)
    return v


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
        if cython.compiled:  # the same fast path, a run of frames at a time with C loads
            pos, d, last_epoch = _good_run(mv, pos, d, min(limit, _D_MAX), max(skip, -_D_MAX), last_epoch,
                                           epoch_limit, stop_pos, positions)  # fmt: skip
            if d >= limit:
                continue
        elif pos + FRAME_HEADER_SIZE <= stop_pos:
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
    if cython.compiled:
        return _slices(raw, positions)
    unpack = _LENGTH.unpack_from
    h = FRAME_HEADER_SIZE
    return [raw[p + h : p + h + unpack(raw, p + LENGTH_AT)[0]] for p in positions]


def _slices(raw: bytes, positions: list[int]) -> list[bytes]:
    """``data_payloads``' payloads compiled: each frame's length a C load from ``raw`` (its
    frames already checked), not a struct call and a tuple per frame. Compiled only."""
    p = cython.cast(cython.p_uchar, cython.cast(cython.p_char, raw))
    out: list[bytes] = []
    for at in positions:
        start = at + _HEADER_LEN
        out.append(raw[start : start + cython.cast(cython.Py_ssize_t, _load_le(p, at + _LENGTH_AT, 4))])
    return out
