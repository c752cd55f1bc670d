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

Ensures: ``encode_frame`` output length is ``frame_size(len(payload))`` and a multiple of 8.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from crc32c import crc32c

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
    "HEAD",
    "REST",
]

MAGIC = 0xA7
FLAG_COMMITTED = 0x80
KIND_MASK = 0x7F
KIND_DATA = 0
KIND_PADDING = 1
KIND_FOOTER = 2
HEAD = struct.Struct("<IBBHIIq")  # the whole header, CRC first: 24 bytes
REST = struct.Struct("<BBHIIq")  # the header after the CRC: 20 bytes
FRAME_HEADER_SIZE = 24
MAX_PAYLOAD = 2**32 - 1
_DATA_FLAGS = FLAG_COMMITTED | KIND_DATA
_PADS = tuple(bytes(i) for i in range(8))  # the zero padding of each length modulo 8
_pack_rest = REST.pack
_pack_u32 = struct.Struct("<I").pack


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
    n = len(payload)
    rest = _pack_rest(MAGIC, FLAG_COMMITTED | kind, epoch, n, delta, timestamp_us)
    pad = _PADS[-(FRAME_HEADER_SIZE + n) & 7]
    c = crc32c(payload, crc32c(rest))
    return b"".join((_pack_u32(crc32c(pad, c) if pad else c), rest, payload, pad))


def encode_data_frame(payload: bytes | bytearray | memoryview, delta: int, timestamp_us: int, epoch: int) -> bytes:
    """``encode_frame`` of a data frame (the writer's per-record hot path).

    >>> encode_data_frame(b"abc", 4, 9, 2) == encode_frame(b"abc", 4, 9, 2)
    True
    """
    n = len(payload)
    rest = _pack_rest(MAGIC, _DATA_FLAGS, epoch, n, delta, timestamp_us)
    pad = _PADS[-(FRAME_HEADER_SIZE + n) & 7]
    c = crc32c(payload, crc32c(rest))
    return b"".join((_pack_u32(crc32c(pad, c) if pad else c), rest, payload, pad))


def encode_data_frames(
    payloads: Sequence[bytes | bytearray | memoryview], first_delta: int, timestamp_us: int, epoch: int
) -> bytes:
    """Consecutive data frames (deltas ``first_delta``, ``first_delta + 1``, ...) in one buffer.

    >>> encode_data_frames([b"a", b"bc"], 3, 9, 1) == encode_frame(b"a", 3, 9, 1) + encode_frame(b"bc", 4, 9, 1)
    True
    """
    pack = _pack_rest
    u32 = _pack_u32
    crc = crc32c
    pads = _PADS
    parts: list[bytes | bytearray | memoryview] = []
    extend = parts.extend
    delta = first_delta
    for p in payloads:
        n = len(p)
        rest = pack(MAGIC, _DATA_FLAGS, epoch, n, delta, timestamp_us)
        pad = pads[-(FRAME_HEADER_SIZE + n) & 7]
        if pad:
            extend((u32(crc(pad, crc(p, crc(rest)))), rest, p, pad))
        else:
            extend((u32(crc(p, crc(rest))), rest, p))
        delta += 1
    return b"".join(parts)


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
