"""Arrow batches straight from a segment mapping (``FrameColumns``), with numpy, no object per row.

The log's columnar read gives each payload as a byte range of the mapping. A binary column is
then copied out of the mapped region by one Arrow ``take`` (frame headers and padding
dropped, one memcpy per payload); version-1 WAL records are decoded by gathering their fixed-size
headers into numpy structured arrays. Anything unusual in a chunk (a record too short for its
op, another record version, a pause or job record, a non-ASCII tube, a body size that does not
match) sends the whole chunk through :func:`stalkd.spark.batches.wal_batch`, which stays the
authority on decoding and on the error naming the bad offset.

Ensures: ``raw_columns_batch`` / ``wal_columns_batch`` equal ``raw_batch`` / ``wal_batch`` of the
same frames (streaming sink markers dropped unless ``markers``); no returned array references
the mapping, so the reader may close it afterwards.

Example::

    >>> from stalkd.log.columns import FrameColumns
    >>> from stalkd.log.frame import encode_frame
    >>> buf = memoryview(encode_frame(b"ab", 0, 1, 1) + encode_frame(b"cd", 1, 2, 1))
    >>> raw_columns_batch(FrameColumns(7, [0, 32], buf)).column("payload").to_pylist()
    [b'ab', b'cd']
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from stalkd.engine.model import HEAD_FIELDS, PUT_FIELDS, RELEASE_FIELDS, RESULT_FIELDS, Op
from stalkd.log import frame
from stalkd.log.columns import FrameColumns
from stalkd.spark.batches import wal_batch
from stalkd.spark.markers import MARKER_MAGIC
from stalkd.spark.schema import OP_NAMES, RAW_ARROW, WAL_ARROW

__all__ = ["raw_columns_batch", "wal_columns_batch", "ranges_binary", "split_by_span", "MAX_BATCH_SPAN"]

# A batch covers at most this much of a segment, whatever its row count: big job bodies keep
# batches (and the JVM's copies of them) bounded, and far below Arrow's 2 GiB binary limit.
MAX_BATCH_SPAN = 64 * 2**20

_TS = pa.timestamp("us", tz="UTC")
_I64_MAX = 2**63 - 1
_NUMPY_CODES = {"B": "u1", "H": "<u2", "I": "<u4", "Q": "<u8", "q": "<i8"}  # struct code -> numpy


def _dtype(fields: tuple[tuple[str, str], ...]) -> np.dtype[Any]:
    """The packed numpy view of a field table (stalkd.log.frame, stalkd.engine.model)."""
    return np.dtype([(name, _NUMPY_CODES[code]) for name, code in fields])


_FRAME = _dtype(frame.HEAD_FIELDS)
# Version-1 record layouts (model.py): header, PUT and RELEASE fields.
_HEAD = _dtype(HEAD_FIELDS)
_PUT = _dtype(PUT_FIELDS)
_RELEASE = _dtype(RELEASE_FIELDS)
_RESULT = _dtype(RESULT_FIELDS)
assert _FRAME.itemsize == frame.FRAME_HEADER_SIZE and frame.LENGTH_AT == 8 and frame.TIMESTAMP_AT == 16
_OP_TABLE = pa.array([OP_NAMES.get(c, "unknown") for c in range(256)], pa.string())
_PUT_OP, _RELEASE_OP, _BURY_OP, _RESULT_OP = int(Op.PUT), int(Op.RELEASE), int(Op.BURY), int(Op.RESULT)
_SLOW_OPS = np.array([int(Op.PAUSE), int(Op.JOB)], np.uint8)


def ranges_binary(src: np.ndarray[Any, Any], starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> pa.Array:
    """A binary array of ``src[starts[i]:ends[i]]``; ranges must be sorted and not overlap.

    >>> ranges_binary(np.frombuffer(b"xxabyc", np.uint8), np.array([2, 5]), np.array([4, 6])).to_pylist()
    [b'ab', b'c']
    """
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    lo, hi = int(starts[0]), int(ends[-1])
    if hi - lo >= 2**31:
        raise ValueError("a batch spanning more than 2 GiB of the segment; use smaller batches")
    # Over the region the ranges span, an array whose even items are the ranges and odd items
    # the gaps between them (frame headers, padding) is a valid zero-copy binary array, since
    # its offsets only grow; Arrow's take then copies the even items out, one memcpy per value
    # (~14x faster than masking the region byte by byte). The result owns its buffers.
    bounds = np.empty(2 * n, np.int32)
    bounds[0::2] = starts - lo
    bounds[1::2] = ends - lo
    spans = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(src[lo:hi])])
    return spans.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))


def split_by_span(cols: FrameColumns, max_span: int = MAX_BATCH_SPAN) -> Iterator[FrameColumns]:
    """``cols`` cut into runs of frames starting within ``max_span`` bytes of their run's first.

    >>> [c.positions for c in split_by_span(FrameColumns(0, [0, 40, 80, 90, 200], memoryview(b"")), 50)]
    [[0, 40], [80, 90], [200]]
    """
    pos = cols.positions
    if not pos or pos[-1] - pos[0] <= max_span:
        yield cols
        return
    i = 0
    while i < len(pos):
        j = bisect_right(pos, pos[i] + max_span, i + 1)
        yield FrameColumns(cols.first_offset + i, pos[i:j], cols.buf)
        i = j


def _gather(src: np.ndarray[Any, Any], at: np.ndarray[Any, Any], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """One ``dtype`` record read at each byte position ``at`` (callers check the bounds)."""
    if not len(at):
        return np.zeros(0, dtype)
    # Rows of a zero-copy sliding window: numpy copies each record's bytes in one go (~3x
    # faster than indexing a position-by-byte index matrix).
    windows = np.lib.stride_tricks.sliding_window_view(src, dtype.itemsize)
    rows: np.ndarray[Any, Any] = windows[at].view(dtype).reshape(len(at))
    return rows


def _frame_fields(src: np.ndarray[Any, Any], positions: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    """(payload lengths, timestamps) from the frame headers at ``positions``, as int64."""
    if len(src) >= 8 and not (positions & 7).any():
        # Frames start 8-aligned (stalkd.log.frame pads them), so the header's 8-byte words
        # can be picked directly: +8 holds length (low half) and delta, +16 the timestamp.
        words = src[: len(src) // 8 * 8].view("<i8")
        at = positions >> 3
        return words[at + 1] & 0xFFFFFFFF, words[at + 2]
    head = _gather(src, positions, _FRAME)
    return head["length"].astype(np.int64), head["timestamp_us"].astype(np.int64)


class _Chunk:
    """The columns of one chunk as numpy arrays, markers dropped unless asked for."""

    def __init__(self, cols: FrameColumns, markers: bool) -> None:
        self.cols = cols
        self.src = np.frombuffer(cols.buf, np.uint8)
        positions = np.array(cols.positions, np.int64)
        lengths, self.stamps = _frame_fields(self.src, positions)
        self.starts = positions + _FRAME.itemsize
        self.ends = self.starts + lengths
        self.offsets = np.arange(cols.first_offset, cols.first_offset + len(cols), dtype=np.int64)
        if not markers and len(self.starts):
            nonempty = self.ends > self.starts
            first = self.src[np.minimum(self.starts, len(self.src) - 1)]
            cand = np.flatnonzero(nonempty & (first == MARKER_MAGIC[0]))
            if len(cand):
                keep = np.ones(len(self.starts), np.bool_)
                buf, m = cols.buf, len(MARKER_MAGIC)
                for i in cand.tolist():
                    s = int(self.starts[i])
                    keep[i] = bytes(buf[s : min(s + m, int(self.ends[i]))]) != MARKER_MAGIC
                self.starts, self.ends = self.starts[keep], self.ends[keep]
                self.offsets, self.stamps = self.offsets[keep], self.stamps[keep]

    def payloads(self) -> list[memoryview]:
        buf = self.cols.buf
        return [buf[s:e] for s, e in zip(self.starts.tolist(), self.ends.tolist(), strict=True)]


def raw_columns_batch(cols: FrameColumns, *, markers: bool = True) -> pa.RecordBatch | None:
    """A ``RAW_ARROW`` batch of the chunk (None if only markers were in it)."""
    c = _Chunk(cols, markers)
    if not len(c.starts):
        return None
    return pa.RecordBatch.from_arrays(
        [pa.array(c.offsets, pa.int64()), pa.array(c.stamps, pa.int64()).cast(_TS),
         ranges_binary(c.src, c.starts, c.ends)],
        schema=RAW_ARROW,
    )  # fmt: skip


def wal_columns_batch(cols: FrameColumns, *, with_body: bool = False, markers: bool = True) -> pa.RecordBatch | None:
    """A ``WAL_ARROW`` batch of the chunk's records (None if only markers were in it)."""
    c = _Chunk(cols, markers)
    n = len(c.starts)
    if not n:
        return None
    fast = _wal_fast(c, with_body)
    if fast is not None:
        return fast
    return wal_batch(c.offsets.tolist(), c.payloads(), with_body=with_body)


def _wal_fast(c: _Chunk, with_body: bool) -> pa.RecordBatch | None:
    """The batch decoded in bulk, or None if the chunk needs the per-record decoder."""
    src, st, en, n = c.src, c.starts, c.ends, len(c.starts)
    lens = en - st
    if (lens < _HEAD.itemsize).any():
        return None
    h = _gather(src, st, _HEAD)
    code = h["op"]
    if (h["version"] != 1).any() or np.isin(code, _SLOW_OPS).any():
        return None
    if (h["seq"] > _I64_MAX).any() or (h["job_id"] > _I64_MAX).any():
        return None
    body_at = st + _HEAD.itemsize
    put = np.flatnonzero(code == _PUT_OP)
    rel = np.flatnonzero(code == _RELEASE_OP)
    bury = np.flatnonzero(code == _BURY_OP)
    res = np.flatnonzero(code == _RESULT_OP)
    if (lens[put] < _HEAD.itemsize + _PUT.itemsize).any() or (lens[rel] < _HEAD.itemsize + _RELEASE.itemsize).any() \
            or (lens[bury] < _HEAD.itemsize + 4).any() or (lens[res] < _HEAD.itemsize + _RESULT.itemsize + 4).any():  # fmt: skip
        return None
    res_deadline = _gather(src, body_at[res], _RESULT)["deadline_us"]
    res_len = _gather(src, body_at[res] + _RESULT.itemsize, np.dtype("<u4")).astype(np.int64)
    if (body_at[res] + _RESULT.itemsize + 4 + res_len != en[res]).any():
        return None
    p = _gather(src, body_at[put], _PUT)
    tube_s = body_at[put] + _PUT.itemsize
    tube_e = tube_s + p["tube_len"]
    if (tube_e + 4 > en[put]).any():
        return None
    blen = _gather(src, tube_e, np.dtype("<u4")).astype(np.int64)
    if (tube_e + 4 + blen != en[put]).any():
        return None
    tubes = ranges_binary(src, tube_s, tube_e)
    if len(tubes.buffers()[2] or b"") and (np.frombuffer(tubes.buffers()[2], np.uint8) >= 128).any():
        return None  # not ASCII: let the per-record decoder name the offset
    r = _gather(src, body_at[rel], _RELEASE)
    b = _gather(src, body_at[bury], np.dtype("<u4"))

    time = h["time_us"].astype(np.int64)
    pri = np.zeros(n, np.int64)
    pri[put], pri[rel], pri[bury] = p["pri"], r["pri"], b
    delay = np.zeros(n, np.int64)
    delay[put], delay[rel] = p["delay"], r["delay"]
    ttr = np.zeros(n, np.int64)
    ttr[put] = p["ttr"]
    deadline = np.zeros(n, np.int64)
    deadline[put], deadline[rel], deadline[res] = p["deadline_us"], r["deadline_us"], res_deadline
    size = np.zeros(n, np.int64)
    size[put], size[res] = blen, res_len
    has_pri = np.zeros(n, np.bool_)
    has_pri[put] = has_pri[rel] = has_pri[bury] = True
    has_delay = np.zeros(n, np.bool_)
    has_delay[put] = has_delay[rel] = True
    is_put = np.zeros(n, np.bool_)
    is_put[put] = True
    has_deadline = has_delay.copy()
    has_deadline[res] = True
    has_size = is_put.copy()
    has_size[res] = True
    where = np.full(n, -1, np.int64)
    where[put] = np.arange(len(put))
    pick = pa.array(where, pa.int64(), mask=~is_put)
    tube = tubes.cast(pa.string()).take(pick)
    body = ranges_binary(src, tube_e + 4, en[put]).take(pick) if with_body else pa.nulls(n, pa.binary())
    return pa.RecordBatch.from_arrays(
        [pa.array(c.offsets, pa.int64()), pa.array(h["seq"].astype(np.int64)), pa.array(time).cast(_TS),
         _OP_TABLE.take(pa.array(code)), pa.array(h["job_id"].astype(np.int64)), tube,
         pa.array(pri, mask=~has_pri), pa.array(delay, mask=~has_delay), pa.array(ttr, mask=~is_put),
         pa.array(deadline, mask=~(has_deadline & (deadline != 0))).cast(_TS), pa.nulls(n, pa.string()),
         pa.array(time, mask=~is_put).cast(_TS), pa.array(size, mask=~has_size), body],
        schema=WAL_ARROW,
    )  # fmt: skip
