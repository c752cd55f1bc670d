"""Columnar bulk reads of one segment: the positions of its valid frames, one int list per chunk.

:meth:`SegmentView.frames` builds a ``Frame`` (and a payload view) per record through a
generator, which dominates bulk consumers such as the Spark source. ``segment_columns`` hands
back, per chunk, where the checked frames lie in the segment mapping (as
:func:`stalkd.log.frame.scan_positions` finds them), so a consumer can gather lengths,
timestamps and payloads in bulk (e.g. numpy, Arrow) without a Python object per row
(``bench/log_columns_bench.py`` measures the difference).

Ensures: for any segment and bounds, the concatenated chunks describe exactly the frames
``SegmentView.frames`` yields (same offsets, timestamps and payload bytes, same CRC/delta/epoch
checks, same torn-tail stop, same ``LogCorruptError`` for a bad frame inside a sealed segment);
offsets within a chunk are consecutive.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from functools import cached_property

from stalkd.values import Value

from .frame import FRAME_HEADER_SIZE, LENGTH_AT, TIMESTAMP_AT, ScanState, scan_positions
from .segment import HEADER_SIZE, SegmentView

__all__ = ["FrameColumns", "scan_columns", "segment_columns"]

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")


class FrameColumns(Value):
    """A run of consecutive data frames of one segment, as columns.

    ``positions`` are the frames' byte positions in ``buf``, the segment's mapping (zero-copy,
    valid while the reader that produced it is open): a frame's 24-byte header is at
    ``positions[i]`` (see :mod:`stalkd.log.frame`: its length is the u32 at ``LENGTH_AT``, its
    timestamp the i64 at ``TIMESTAMP_AT``) and its payload follows the header. Bulk consumers read those fields
    vectorised (e.g. numpy); ``timestamps_us``, ``starts`` and ``ends`` decode them in Python.

    >>> from stalkd.log.frame import encode_frame
    >>> buf = memoryview(encode_frame(b"ab", 0, 10, 1) + encode_frame(b"", 1, 20, 1))
    >>> c = FrameColumns(5, [0, 32], buf)
    >>> list(c.offsets), c.timestamps_us, [bytes(p) for p in c.payloads()]
    ([5, 6], [10, 20], [b'ab', b''])
    """

    __slots__ = ("first_offset", "positions", "buf", "__dict__")  # __dict__: the cached properties'
    first_offset: int
    positions: list[int]
    buf: memoryview

    def __init__(self, first_offset: int, positions: list[int], buf: memoryview) -> None:
        self.first_offset = first_offset
        self.positions = positions
        self.buf = buf

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def offsets(self) -> range:
        """The log offsets of the rows (consecutive)."""
        return range(self.first_offset, self.first_offset + len(self.positions))

    @cached_property
    def timestamps_us(self) -> list[int]:
        """Each frame's timestamp (microseconds since the epoch)."""
        unpack, buf = _I64.unpack_from, self.buf
        return [unpack(buf, p + TIMESTAMP_AT)[0] for p in self.positions]

    @cached_property
    def starts(self) -> list[int]:
        """Where each payload starts in ``buf``."""
        return [p + FRAME_HEADER_SIZE for p in self.positions]

    @cached_property
    def ends(self) -> list[int]:
        """Where each payload ends in ``buf`` (exclusive)."""
        unpack, buf = _U32.unpack_from, self.buf
        return [p + FRAME_HEADER_SIZE + unpack(buf, p + LENGTH_AT)[0] for p in self.positions]

    def payloads(self) -> list[memoryview]:
        """Zero-copy views of the payloads (one object per row: for the slow paths)."""
        buf = self.buf
        return [buf[s:e] for s, e in zip(self.starts, self.ends, strict=True)]


def scan_columns(
    mv: memoryview,
    base: int,
    epoch_limit: int,
    state: ScanState,
    stop_pos: int,
    stop_offset: int | None,
    skip_before: int,
    max_rows: int,
) -> FrameColumns:
    """Up to ``max_rows`` valid data frames from ``state.pos``, as columns; ``state`` is updated
    (see :func:`stalkd.log.frame.scan_positions`, which checks them)."""
    positions = scan_positions(mv, base, epoch_limit, state, stop_pos, stop_offset, skip_before, max_rows)
    return FrameColumns(state.offset - len(positions), positions, mv)


def segment_columns(
    view: SegmentView, start: int, end: int | None, max_rows: int, state: ScanState | None = None
) -> Iterator[FrameColumns]:
    """Chunks of at most ``max_rows`` frames with ``start <= offset < end`` (never empty).

    Same bounds and errors as ``view.frames(start, end)``: a bad frame in a sealed segment
    raises ``LogCorruptError`` (after the good frames before it were handed out).
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, not {max_rows}")
    st = state if state is not None else ScanState(HEADER_SIZE, view.base)
    st.pos, st.offset, st.epoch, st.status = HEADER_SIZE, view.base, 0, ""
    sealed_end, stop_pos, stop_offset = view.bounds(end)
    epoch_limit = view.epoch
    while True:
        cols = scan_columns(view.mv, view.base, epoch_limit, st, stop_pos, stop_offset, start, max_rows)
        if cols.positions:
            yield cols
        if st.status != "limit" or (stop_offset is not None and st.offset >= stop_offset):
            break
    view.check_complete(st, sealed_end)
