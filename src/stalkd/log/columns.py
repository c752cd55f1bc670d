"""Columnar bulk reads of one segment: the positions of its valid frames, one int list per chunk.

:meth:`SegmentView.frames` builds a ``Frame`` (and a payload view) per record through a
generator, which dominates bulk consumers such as the Spark source. ``segment_columns`` runs
the same checks in one tight loop and hands back, per chunk, where the checked frames lie in the
segment mapping, so a consumer can gather lengths, timestamps and payloads in bulk (e.g. numpy,
Arrow) without a Python object per row. Measured on 300k WAL frames: ~2.4x faster than
iterating ``frames`` (profile in the Spark source's history).

Ensures: for any segment and bounds, the concatenated chunks describe exactly the frames
``SegmentView.frames`` yields (same offsets, timestamps and payload bytes, same CRC/delta/epoch
checks, same torn-tail stop, same ``LogCorruptError`` for a bad frame inside a sealed segment);
offsets within a chunk are consecutive.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from crc32c import crc32c

from .errors import LogCorruptError
from .frame import FRAME_HEADER_SIZE, HEAD, KIND_DATA, KIND_FOOTER, KIND_MASK, MAGIC
from .segment import HEADER_SIZE, ScanState, SegmentView, repair_hint

__all__ = ["FrameColumns", "scan_columns", "segment_columns"]

_ZERO_HEAD = bytes(FRAME_HEADER_SIZE)
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")


@dataclass(frozen=True)
class FrameColumns:
    """A run of consecutive data frames of one segment, as columns.

    ``positions`` are the frames' byte positions in ``buf``, the segment's mapping (zero-copy,
    valid while the reader that produced it is open): a frame's 24-byte header is at
    ``positions[i]`` (see :mod:`stalkd.log.frame`; its length is the u32 at +8, its timestamp
    the i64 at +16) and its payload follows the header. Bulk consumers read those fields
    vectorised (e.g. numpy); ``timestamps_us``, ``starts`` and ``ends`` decode them in Python.

    >>> from stalkd.log.frame import encode_frame
    >>> buf = memoryview(encode_frame(b"ab", 0, 10, 1) + encode_frame(b"", 1, 20, 1))
    >>> c = FrameColumns(5, [0, 32], buf)
    >>> list(c.offsets), c.timestamps_us, [bytes(p) for p in c.payloads()]
    ([5, 6], [10, 20], [b'ab', b''])
    """

    first_offset: int
    positions: list[int]
    buf: memoryview

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
        return [unpack(buf, p + 16)[0] for p in self.positions]

    @cached_property
    def starts(self) -> list[int]:
        """Where each payload starts in ``buf``."""
        return [p + FRAME_HEADER_SIZE for p in self.positions]

    @cached_property
    def ends(self) -> list[int]:
        """Where each payload ends in ``buf`` (exclusive)."""
        unpack, buf = _U32.unpack_from, self.buf
        return [p + FRAME_HEADER_SIZE + unpack(buf, p + 8)[0] for p in self.positions]

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
    """Up to ``max_rows`` valid data frames from ``state.pos``, as columns; ``state`` is updated.

    The checks are :func:`stalkd.log.segment.scan`'s, frame for frame. ``state.status`` is
    "limit" when ``stop_offset`` or ``max_rows`` stopped it (call again for more), else as in
    ``scan``.
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
    status = ""
    while True:
        if d >= limit:
            status = "limit"
            break
        if pos + FRAME_HEADER_SIZE <= stop_pos:
            crc, magic, flags, epoch, length, delta, ts = head_unpack(mv, pos)
            nxt = (pos + FRAME_HEADER_SIZE + length + 7) & ~7
            # Fast path: a good data frame (every check scan() makes, in one condition).
            if (delta == d and magic == MAGIC and not flags & KIND_MASK and last_epoch <= epoch <= epoch_limit
                    and nxt <= stop_pos and crc == crc32c(mv[pos + 4 : nxt])):  # fmt: skip
                if d >= skip:
                    add(pos)
                last_epoch = epoch
                pos = nxt
                d += 1
                continue
        # Anything else: scan()'s decision for this frame, step by step.
        if pos + FRAME_HEADER_SIZE > stop_pos:
            status = "end" if pos >= stop_pos or not any(mv[pos:stop_pos]) else "bad"
            break
        if magic != MAGIC:
            status = "end" if mv[pos : pos + FRAME_HEADER_SIZE] == _ZERO_HEAD else "bad"
            break
        if nxt > stop_pos or epoch > epoch_limit or epoch < last_epoch or crc != crc32c(mv[pos + 4 : nxt]):
            status = "bad"
            break
        kind = flags & KIND_MASK
        if kind == KIND_DATA:  # here: its delta is wrong
            status = "bad"
            break
        if kind == KIND_FOOTER:
            status = "footer"
            break
        last_epoch = epoch  # padding or a kind this version does not know: skippable
        pos = nxt
    state.pos, state.offset, state.epoch, state.status = pos, base + d, last_epoch, status
    return FrameColumns(base + d - len(positions), positions, mv)


def segment_columns(
    view: SegmentView, start: int, end: int | None, max_rows: int, state: ScanState | None = None
) -> Iterator[FrameColumns]:
    """Chunks of at most ``max_rows`` frames with ``start <= offset < end`` (never empty).

    Same bounds and errors as ``view.frames(start, end)``: a bad frame in a sealed segment
    raises ``LogCorruptError`` (after the good frames before it were handed out).

    >>> # for cols in segment_columns(SegmentView(path), 0, None, 8192): ...
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, not {max_rows}")
    st = state if state is not None else ScanState(HEADER_SIZE, view.base)
    st.pos, st.offset, st.epoch, st.status = HEADER_SIZE, view.base, 0, ""
    if view.footer is None:
        view.footer = view.read_footer()  # a writer may have sealed it since we mapped it
    sealed_end = view.footer
    stop_pos = sealed_end[1] if sealed_end else view.size
    stop_offset = end if sealed_end is None or end is None else min(end, sealed_end[0])
    if sealed_end and stop_offset is None:
        stop_offset = sealed_end[0]
    epoch_limit = view.epoch
    while True:
        cols = scan_columns(view.mv, view.base, epoch_limit, st, stop_pos, stop_offset, start, max_rows)
        if cols.positions:
            yield cols
        if st.status != "limit" or (stop_offset is not None and st.offset >= stop_offset):
            break
    if sealed_end is not None and st.status != "limit" and st.offset < sealed_end[0]:
        raise LogCorruptError(
            f"{view.path}: bad frame at byte {st.pos} (offset {st.offset}) inside a sealed segment "
            f"that should hold offsets {view.base}..{sealed_end[0] - 1}; to cut the log there (the "
            f"dropped bytes are kept), run: {repair_hint(view.path)}",
            path=view.path,
            position=st.pos,
            offset=st.offset,
        )
