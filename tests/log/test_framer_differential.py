"""The C leaf behind ``frame.encode_data_frames`` (``stalkd.log._framer``) against the Python
rule it stands in for (``frame.py_encode_data_frames``): the same bytes for random batches,
empty and huge payloads, every buffer type the writer hands it, and a refusal of what the
format cannot hold; and the frames it writes read back by the scanner."""

from __future__ import annotations

import random
import struct

import pytest

from stalkd.extensions import compiled_module
from stalkd.log import frame

_framer = compiled_module("stalkd.log._framer")
pytestmark = pytest.mark.skipif(_framer is None, reason="the C framer is not built (or switched off)")


def _c(payloads: object, first: int, ts: int, epoch: int) -> bytes:
    assert _framer is not None
    return _framer.encode_data_frames(payloads, first, ts, epoch)  # type: ignore[no-any-return]


def test_the_public_function_is_the_leaf_when_built() -> None:
    assert frame._c_frames is not None
    payloads = [b"x" * 5, b""]
    assert frame.encode_data_frames(payloads, 2, 3, 4) == _c(payloads, 2, 3, 4)


@pytest.mark.parametrize("seed", range(40))
def test_random_batches_frame_to_the_same_bytes(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([0, 1, 2, 7, 64, 1000])
    payloads = [rng.randbytes(rng.choice([0, 1, 7, 8, 9, 16, 100, rng.randrange(5000)])) for _ in range(count)]
    first = rng.choice([0, 1, rng.randrange(2**32 - count), 2**32 - max(count, 1)])
    ts = rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-(2**63), 2**63)])
    epoch = rng.choice([0, 1, 0xFFFF, rng.randrange(0x10000)])
    want = frame.py_encode_data_frames(payloads, first, ts, epoch)
    assert _c(payloads, first, ts, epoch) == want
    assert _c(tuple(payloads), first, ts, epoch) == want
    assert len(want) == sum(frame.frame_size(len(p)) for p in payloads)


def test_empty_batch_empty_payload_and_every_padding() -> None:
    assert _c([], 0, 0, 0) == frame.py_encode_data_frames([], 0, 0, 0) == b""
    for n in range(17):  # each length modulo 8, twice
        p = bytes(range(n))
        assert _c([p], 5, 6, 7) == frame.encode_frame(p, 5, 6, 7)


def test_huge_payloads() -> None:
    rng = random.Random(7)
    payloads = [rng.randbytes(3 * 2**20 + 5), b"", rng.randbytes(2**20)]
    assert _c(payloads, 10, 11, 12) == frame.py_encode_data_frames(payloads, 10, 11, 12)


def test_every_buffer_type_the_writer_hands_it() -> None:
    raw = b"0123456789abcdef" * 3
    payloads: list[bytes | bytearray | memoryview] = [raw, bytearray(raw[:9]), memoryview(raw)[3:20],
                                                      memoryview(bytearray(raw))[1:]]
    assert _c(payloads, 0, 1, 2) == frame.py_encode_data_frames(payloads, 0, 1, 2)


def test_frames_read_back_by_the_scanner() -> None:
    rng = random.Random(3)
    payloads = [rng.randbytes(rng.randrange(300)) for _ in range(50)]
    buf = memoryview(_c(payloads, 0, 99, 1) + bytes(frame.FRAME_HEADER_SIZE))
    frames: list[frame.Frame] = list(frame.scan(buf, 0, 1, frame.ScanState(0, 0), len(buf)))
    assert [f.bytes() for f in frames] == payloads


@pytest.mark.parametrize(
    ("payloads", "first", "ts", "epoch"),
    [
        ([b"a"], -1, 0, 0),  # a delta below 0
        ([b"a", b"b"], 2**32 - 1, 0, 0),  # the second frame's delta past u32
        ([b"a"], 0, 2**63, 0),  # a timestamp past i64
        ([b"a"], 0, 0, 0x10000),  # an epoch past u16
        ([b"a"], 0, 0, -1),
    ],
)
def test_both_refuse_what_the_format_cannot_hold(payloads: list[bytes], first: int, ts: int, epoch: int) -> None:
    with pytest.raises(struct.error):
        frame.py_encode_data_frames(payloads, first, ts, epoch)
    with pytest.raises(OverflowError):
        _c(payloads, first, ts, epoch)


@pytest.mark.parametrize("bad", [["text"], [b"a", 3], 5, [None]])
def test_both_refuse_what_is_not_a_batch_of_buffers(bad: object) -> None:
    with pytest.raises(TypeError):
        frame.py_encode_data_frames(bad, 0, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _c(bad, 0, 0, 0)


def test_one_frame_by_the_leaf_is_the_rules_frame() -> None:
    rng = random.Random(11)
    for _ in range(200):
        p = rng.randbytes(rng.randrange(70))
        delta, ts, epoch = rng.randrange(2**32), rng.randrange(-(2**63), 2**63), rng.randrange(2**16)
        assert frame.encode_data_frame(p, delta, ts, epoch) == frame.encode_frame(p, delta, ts, epoch)
        buf = bytearray(200)
        end = frame.put_data_frame(buf, 8, 200, p, delta, ts, epoch)
        assert bytes(buf[8:end]) == frame.encode_frame(p, delta, ts, epoch)
