"""The compiled frame encoder (stalkd.log._frames) against the reference
(frame.encode_data_frames): the same payloads give the same bytes or the same error, and its
CRC32C is the crc32c package's. Skipped when the extension is not active
(``STALKD_NO_EXTENSIONS=1`` or no compiler).
"""

from __future__ import annotations

from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stalkd.log import fastframe, frame

pytestmark = pytest.mark.skipif(fastframe.IMPLEMENTATION != "c", reason="the compiled encoder is not active")

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

payloads = st.one_of(st.binary(max_size=200), st.binary(max_size=20).map(bytearray),
                     st.binary(max_size=20).map(memoryview))  # fmt: skip
ints = st.one_of(st.integers(0, 2**16), st.sampled_from([2**16 - 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, -1]),
                 st.integers(-(2**66), 2**66))  # fmt: skip


def outcome(encode: Any, *args: object) -> tuple[str, object]:
    try:
        return "bytes", encode(*args)
    except Exception as e:
        return type(e).__name__, str(e)


@SETTINGS
@given(st.lists(payloads, max_size=6), ints, ints, ints, st.booleans())
def test_same_bytes_or_same_error(items: list[Any], delta: int, ts: int, epoch: int, as_tuple: bool) -> None:
    seq = tuple(items) if as_tuple else items
    assert outcome(fastframe.encode_data_frames, seq, delta, ts, epoch) == outcome(
        frame.encode_data_frames, seq, delta, ts, epoch)


@SETTINGS
@given(st.lists(st.binary(max_size=100), min_size=1, max_size=4), st.integers(0, 2**32 - 5), st.integers(0, 2**63 - 1),
       st.integers(0, 2**16 - 1))  # fmt: skip
def test_frames_in_range_read_back(items: list[bytes], delta: int, ts: int, epoch: int) -> None:
    data = fastframe.encode_data_frames(items, delta, ts, epoch)
    assert data == frame.encode_data_frames(items, delta, ts, epoch)
    assert len(data) == sum(frame.frame_size(len(p)) for p in items)


@SETTINGS
@given(st.binary(max_size=300), st.integers(0, 2**32 - 1), st.booleans())
def test_crc_is_crc32c(data: bytes, value: int, table: bool) -> None:
    """By the SSE 4.2 instruction (where the CPU has it, as the frames use it) and by the table
    (the other CPUs)."""
    from stalkd.log import _frames  # type: ignore[attr-defined]

    assert _frames.crc32c(data, value, table) == crc32c(data, value)


def put_outcome(put: Any, size: int, *args: object) -> tuple[str, object, bytes]:
    buf = bytearray(b"\xee" * size)
    try:
        return "end", put(buf, *args), bytes(buf)
    except Exception as e:
        return type(e).__name__, str(e), bytes(buf)


@SETTINGS
@given(st.integers(0, 400), st.integers(-8, 300), st.integers(-8, 400), payloads, ints, ints, ints)
def test_put_same_end_and_bytes_or_same_error(size: int, pos: int, room: int, payload: Any, delta: int, ts: int,
                                              epoch: int) -> None:  # fmt: skip
    """Into a buffer of ``size`` bytes: the same end (or -1) and the same bytes written, or the same error."""
    args = (pos, room, payload, delta, ts, epoch)
    assert put_outcome(fastframe.put_data_frame, size, *args) == put_outcome(frame.put_data_frame, size, *args)


def test_put_writes_through_a_mapping() -> None:
    """The writer's case: the frame lands in a shared mapping, byte for byte the encoder's."""
    import mmap

    m = mmap.mmap(-1, 4096)
    try:
        assert fastframe.put_data_frame(m, 64, 4096, b"payload", 7, 123, 3) == 64 + frame.frame_size(7)
        assert m[64 : 64 + frame.frame_size(7)] == frame.encode_data_frame(b"payload", 7, 123, 3)
        assert fastframe.put_data_frame(m, 4090, 4096, b"", 0, 0, 0) == -1
    finally:
        m.close()
