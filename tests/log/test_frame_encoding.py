"""The frame encoder (``frame.encode_data_frames``, ``encode_frame``, ``put_data_frame``) against
the layout its module documents, built here field by field with the ``crc32c`` package: the same
bytes for random batches, empty and huge payloads, every padding and every buffer type the writer
hands it; a refusal of what the format cannot hold; frames written in place touch nothing around
them; and what it writes reads back through the scanner. Run on both builds (compiled and
``STALKD_NO_EXTENSIONS=1``), this holds the compiled encoder to the same rule as the plain one."""

from __future__ import annotations

import mmap
import os
import random
import struct
import subprocess
import sys

import pytest
from crc32c import crc32c

from stalkd.log import frame

_REST = struct.Struct("<BBHIIq")  # magic, flags, epoch, length, delta, timestamp_us


def reference(payload: bytes, delta: int, ts: int, epoch: int, kind: int = frame.KIND_DATA) -> bytes:
    """One frame as the module docstring states it, independently of the encoder."""
    body = _REST.pack(0xA7, 0x80 | kind, epoch, len(payload), delta, ts) + payload
    body += bytes(-(4 + len(body)) % 8)
    return struct.pack("<I", crc32c(body)) + body


def references(payloads: list[bytes], first: int, ts: int, epoch: int) -> bytes:
    return b"".join(reference(bytes(p), first + i, ts, epoch) for i, p in enumerate(payloads))


@pytest.mark.parametrize("seed", range(30))
def test_random_batches_are_the_documented_layout(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([0, 1, 2, 7, 64, 500])
    payloads = [rng.randbytes(rng.choice([0, 1, 7, 8, 9, 16, 100, rng.randrange(5000)])) for _ in range(count)]
    first = rng.choice([0, 1, rng.randrange(2**32 - count), 2**32 - max(count, 1)])
    ts = rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-(2**63), 2**63)])
    epoch = rng.choice([0, 1, 0xFFFF, rng.randrange(0x10000)])
    want = references(payloads, first, ts, epoch)
    assert frame.encode_data_frames(payloads, first, ts, epoch) == want
    assert frame.encode_data_frames(tuple(payloads), first, ts, epoch) == want
    assert len(want) == sum(frame.frame_size(len(p)) for p in payloads)


def test_empty_batch_empty_payload_every_padding_and_every_kind() -> None:
    assert frame.encode_data_frames([], 0, 0, 0) == b""
    for n in range(17):  # each length modulo 8, twice
        p = bytes(range(n))
        assert frame.encode_data_frame(p, 5, 6, 7) == frame.encode_frame(p, 5, 6, 7) == reference(p, 5, 6, 7)
    for kind in (frame.KIND_PADDING, frame.KIND_FOOTER, 5):
        assert frame.encode_frame(b"xyz", 0, 1, 2, kind) == reference(b"xyz", 0, 1, 2, kind)


def test_huge_payloads() -> None:
    rng = random.Random(7)
    payloads = [rng.randbytes(3 * 2**20 + 5), b"", rng.randbytes(2**20)]
    assert frame.encode_data_frames(payloads, 10, 11, 12) == references(payloads, 10, 11, 12)


def test_every_buffer_type_the_writer_hands_it() -> None:
    raw = b"0123456789abcdef" * 3
    payloads: list[bytes | bytearray | memoryview] = [raw, bytearray(raw[:9]), memoryview(raw)[3:20],
                                                      memoryview(bytearray(raw))[1:]]  # fmt: skip
    want = references([bytes(p) for p in payloads], 0, 1, 2)
    assert frame.encode_data_frames(payloads, 0, 1, 2) == want


def test_frames_read_back_by_the_scanner() -> None:
    rng = random.Random(3)
    payloads = [rng.randbytes(rng.randrange(300)) for _ in range(50)]
    buf = memoryview(frame.encode_data_frames(payloads, 0, 99, 1) + bytes(frame.FRAME_HEADER_SIZE))
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
def test_refuses_what_the_format_cannot_hold(payloads: list[bytes], first: int, ts: int, epoch: int) -> None:
    with pytest.raises(OverflowError):
        frame.encode_data_frames(payloads, first, ts, epoch)
    with pytest.raises(OverflowError):
        frame.put_data_frame(bytearray(64), 0, 64, payloads[-1], first + len(payloads) - 1, ts, epoch)


@pytest.mark.parametrize("bad", [["text"], [b"a", 3], 5, [None]])
def test_refuses_what_is_not_a_batch_of_buffers(bad: object) -> None:
    with pytest.raises(TypeError):
        frame.encode_data_frames(bad, 0, 0, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["bytearray", "mmap"])
def test_put_in_place_writes_the_frame_its_padding_and_nothing_around_it(kind: str) -> None:
    """A segment's mapping may hold anything past the written data (a reused spare segment): the
    frame's padding is written as zeros, and the bytes before and after it are left alone."""
    rng = random.Random(11)
    size = 256
    buf: bytearray | mmap.mmap = bytearray(b"\xff" * size) if kind == "bytearray" else mmap.mmap(-1, size)
    try:
        for _ in range(200):
            buf[:] = b"\xff" * size
            p = rng.randbytes(rng.randrange(70))
            delta, ts, epoch = rng.randrange(2**32), rng.randrange(-(2**63), 2**63), rng.randrange(2**16)
            end = frame.put_data_frame(buf, 8, size, p, delta, ts, epoch)
            assert end == 8 + frame.frame_size(len(p))
            assert bytes(buf[8:end]) == reference(p, delta, ts, epoch)
            assert bytes(buf[:8]) + bytes(buf[end:]) == b"\xff" * (8 + size - end)
        assert frame.put_data_frame(buf, size - 24, size, b"a", 0, 0, 0) == -1
        assert bytes(buf[size - 24 :]) == b"\xff" * 24, "a frame that does not fit writes nothing"
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def test_the_tables_sum_where_the_crc_instruction_is_off() -> None:
    """Compiled, frames sum their CRCs by the CPU's crc32 instruction where it has one, so the
    tables that serve elsewhere would go untested here: this file's tests, the column scan's and
    the frames message's run again with the instruction off (CRC32C_SKIP_HW_PROBE=1, the
    ``crc32c`` package's own switch to its software sum)."""
    if os.environ.get("CRC32C_SKIP_HW_PROBE") == "1":
        assert not frame.CRC_INSTRUCTION
        pytest.skip("this run is the one with the instruction off")
    if not frame.CRC_INSTRUCTION:
        pytest.skip("the tables are what this run sums by")
    here = os.path.dirname(os.path.abspath(__file__))
    files = [os.path.join(here, f) for f in ("test_frame_encoding.py", "test_columns.py", "test_data_payloads.py")]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *files],
                          env={**os.environ, "CRC32C_SKIP_HW_PROBE": "1"}, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
