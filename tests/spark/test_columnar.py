"""Arrow batches built from the log's columnar read equal the per-frame builders (``raw_batch`` /
``wal_batch``) for every op, with and without bodies and markers, and bad records fail the same
way, naming the offset. Pure: no Spark session."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from stalkd.engine.model import JobState, Op, Record, encode
from stalkd.log import Log, LogReader
from stalkd.log.columns import FrameColumns
from stalkd.spark.batches import RecordDecodeError, raw_batch, wal_batch
from stalkd.spark.columnar import ranges_binary, raw_columns_batch, split_by_span, wal_columns_batch
from stalkd.spark.sink import is_marker, marker

T0 = 1_700_000_000_000_000


def common_records(n: int) -> Iterator[Record]:
    """Every op the bulk decoder handles itself, with varied tubes, bodies and deadlines."""
    for i in range(n):
        t = T0 + i * 10
        k = i % 9
        if k == 0:
            yield Record(Op.PUT, i, t, i, tube=f"tube-{i % 5}" * (i % 3), pri=i % 7, delay=i % 4, ttr=60,
                         deadline_us=(t + 5) if i % 2 else 0, body=bytes([i % 256]) * (i % 50), created_us=t)
        elif k == 1:
            yield Record(Op.RELEASE, i, t, i - 1, pri=2**32 - 1, delay=3, deadline_us=t if i % 2 else 0)
        elif k == 2:
            yield Record(Op.BURY, i, t, i - 2, pri=5)
        else:
            yield Record([Op.DELETE, Op.KICK, Op.TOUCH, Op.RESERVE, Op.TIMEOUT, Op.DELETE][k - 3], i, t, i - 3)


def write_log(d: Path, payloads: list[bytes]) -> None:
    with Log.open(d, segment_size=8192, durability="never") as log:
        log.append_many(payloads)


def chunks(d: Path, max_rows: int) -> list[FrameColumns]:
    """Every chunk of the log; the reader stays open (its mappings back the chunks) until GC."""
    reader = LogReader(d)
    return [c for seg in reader.segments() for c in reader.read_segment_columns(seg.path, None, None, max_rows)]


def expected(cols: FrameColumns, wal: bool, body: bool, markers: bool) -> pa.RecordBatch | None:
    rows = [(o, t, p) for o, t, p in zip(cols.offsets, cols.timestamps_us, cols.payloads(), strict=True)
            if markers or not is_marker(p)]  # fmt: skip
    if not rows:
        return None
    offsets, stamps, payloads = (list(c) for c in zip(*rows, strict=True))
    return wal_batch(offsets, payloads, with_body=body) if wal else raw_batch(offsets, stamps, payloads)


def outcome(build: Callable[[], pa.RecordBatch | None]) -> object:
    try:
        batch = build()
    except RecordDecodeError as exc:
        return str(exc)
    return None if batch is None else (batch.schema, batch.to_pylist())


def assert_equal_batches(d: Path, wal: bool, max_rows: int = 64) -> int:
    """Both builders agree on every chunk and option; returns the rows seen without markers."""
    rows = 0
    for cols in chunks(d, max_rows):
        for markers in (False, True):
            for body in (False, True) if wal else (False,):
                want = outcome(lambda: expected(cols, wal, body, markers))  # noqa: B023
                got = outcome(lambda: wal_columns_batch(cols, with_body=body, markers=markers) if wal  # noqa: B023
                              else raw_columns_batch(cols, markers=markers))  # noqa: B023
                assert got == want, cols.first_offset
                if not markers and not body and isinstance(got, tuple):
                    rows += len(got[1])
    return rows


def test_wal_and_raw_batches_equal_the_per_frame_builders(tmp_path: Path) -> None:
    payloads = [encode(r) for r in common_records(700)]
    # Streaming sink markers in between, and a chunk made only of markers.
    payloads[10:10] = [marker(1, 10)]
    payloads[300:300] = [marker(2, 5)] * 70
    write_log(tmp_path, payloads)
    # (With markers=true a WAL read fails on the first marker, not a record: the same in both.)
    assert assert_equal_batches(tmp_path, wal=False) == assert_equal_batches(tmp_path, wal=True) == 700


def test_pause_and_job_records_take_the_model_decoder_and_agree(tmp_path: Path) -> None:
    payloads = [encode(r) for r in common_records(40)]
    payloads.insert(5, encode(Record(Op.PAUSE, 99, T0, 0, tube="paused", delay=30, deadline_us=T0 + 1)))
    payloads.insert(20, encode(Record(Op.JOB, 100, T0, 7, tube="snap", pri=1, ttr=9, body=b"bb",
                                      state=JobState.BURIED, created_us=T0 - 5)))  # fmt: skip
    write_log(tmp_path, payloads)
    assert assert_equal_batches(tmp_path, wal=True, max_rows=16) == len(payloads)
    got = [b for c in chunks(tmp_path, 100) if (b := wal_columns_batch(c)) is not None]
    rows = [r for b in got for r in b.to_pylist()]
    assert rows[5]["op"] == "pause" and rows[5]["tube"] == "paused"
    assert rows[20]["state"] == "buried" and rows[20]["body_size"] == 2


def test_result_records_show_their_expiry_and_size_in_both_builders(tmp_path: Path) -> None:
    payloads = [encode(r) for r in common_records(60)]
    for at in (3, 30, 31):
        payloads.insert(at, encode(Record(Op.RESULT, 200 + at, T0, at, deadline_us=T0 + 60_000_000,
                                          body=b"r" * at)))  # fmt: skip
    payloads.insert(40, encode(Record(Op.RESULT, 300, T0, 9)))  # a forgotten result: no deadline
    write_log(tmp_path, payloads)
    assert assert_equal_batches(tmp_path, wal=True, max_rows=16) == len(payloads)
    rows = [r for c in chunks(tmp_path, 100) if (b := wal_columns_batch(c)) is not None for r in b.to_pylist()]
    results = [(r["job_id"], r["body_size"], r["deadline"] is not None) for r in rows if r["op"] == "result"]
    assert results == [(3, 3, True), (30, 30, True), (31, 31, True), (9, 0, False)]


def test_epoch_records_read_as_epoch_rows_in_both_builders(tmp_path: Path) -> None:
    payloads = [encode(r) for r in common_records(30)]
    payloads.insert(12, encode(Record(Op.EPOCH, 500, T0, epoch=2, start_offset=12)))
    write_log(tmp_path, payloads)
    assert assert_equal_batches(tmp_path, wal=True, max_rows=16) == len(payloads)
    rows = [r for c in chunks(tmp_path, 100) if (b := wal_columns_batch(c)) is not None for r in b.to_pylist()]
    assert [(r["offset"], r["seq"], r["job_id"], r["tube"]) for r in rows if r["op"] == "epoch"] == [(12, 500, 0, None)]


def put(tube: bytes = b"t", body: bytes = b"xyz") -> bytes:
    return encode(Record(Op.PUT, 1, T0, 1, tube="t", body=body)).replace(b"\x01\x00t", len(tube).to_bytes(2, "little") + tube)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (b"\x01\x02short", "at least 26 bytes"),
        (put()[:-1], "body length"),
        (put(tube=b"caf\xe9"), "ascii"),
        (put()[:30], "unpack"),
        (encode(Record(Op.RELEASE, 1, T0, 1))[:-2], "unpack"),
        (encode(Record(Op.BURY, 1, T0, 1))[:-1], "unpack"),
        (b"\x07" + encode(Record(Op.DELETE, 1, T0, 1))[1:], "version 7"),
    ],
)
def test_a_bad_record_fails_like_the_per_frame_decoder(tmp_path: Path, bad: bytes, why: str) -> None:
    good = [encode(r) for r in common_records(30)]
    write_log(tmp_path, [*good[:12], bad, *good[12:]])
    (cols,) = chunks(tmp_path, 100)
    with pytest.raises(RecordDecodeError, match=f"log offset 12: .*{why}"):
        wal_batch(list(cols.offsets), cols.payloads())
    with pytest.raises(RecordDecodeError, match=f"log offset 12: .*{why}"):
        wal_columns_batch(cols)


def test_ranges_binary_edge_cases() -> None:
    src = np.frombuffer(b"0123456789", np.uint8)
    assert ranges_binary(src, np.array([], np.int64), np.array([], np.int64)).to_pylist() == []
    empties = ranges_binary(src, np.array([1, 4]), np.array([1, 4]))
    assert empties.to_pylist() == [b"", b""]
    mixed = ranges_binary(src, np.array([0, 2, 2, 9]), np.array([1, 2, 5, 10]))
    assert mixed.to_pylist() == [b"0", b"", b"234", b"9"]
    assert struct.unpack("<5i", mixed.buffers()[1].to_pybytes()[:20]) == (0, 1, 1, 4, 5)


def test_ranges_binary_owns_its_bytes() -> None:
    """The reader closes the mapping after each batch, so no result may point into ``src``."""
    raw = bytearray(b"header-payload-one|header-payload-two|")
    src = np.frombuffer(raw, np.uint8)
    got = ranges_binary(src, np.array([7, 26]), np.array([18, 37]))
    raw[:] = bytes(len(raw))  # as if the mapping were gone
    assert got.to_pylist() == [b"payload-one", b"payload-two"]
    lo, hi = src.ctypes.data, src.ctypes.data + len(raw)
    assert all(b is None or not lo <= b.address < hi for b in got.buffers())


def test_unaligned_frames_take_the_general_header_gather() -> None:
    """Frames are 8-aligned in the log; a buffer where they are not gives the same batch."""
    from stalkd.log.frame import encode_frame

    frames = [encode_frame(b"p" * (i * 3 % 11), i, 1000 + i, 1) for i in range(20)]
    positions = [sum(len(f) for f in frames[:i]) for i in range(20)]
    aligned = raw_columns_batch(FrameColumns(5, positions, memoryview(b"".join(frames))))
    shifted = raw_columns_batch(FrameColumns(5, [p + 4 for p in positions], memoryview(b"abcd" + b"".join(frames))))
    assert aligned is not None and shifted is not None
    assert shifted.equals(aligned)
    assert aligned.column("payload").to_pylist() == [b"p" * (i * 3 % 11) for i in range(20)]
    assert aligned.column("offset").to_pylist() == list(range(5, 25))


def test_big_payloads_split_batches_by_span_and_lose_nothing(tmp_path: Path) -> None:
    payloads = [bytes([i]) * (700 + 37 * i) for i in range(60)]
    with Log.open(tmp_path, segment_size=1 << 20, durability="never") as log:
        log.append_many(payloads)
    (whole,) = chunks(tmp_path, 1000)
    pieces = list(split_by_span(whole, 5000))
    assert len(pieces) > 5
    assert all(p.positions[-1] - p.positions[0] <= 5000 for p in pieces)
    assert [o for p in pieces for o in p.offsets] == list(range(60))
    batches = [raw_columns_batch(p) for p in pieces]
    got = pa.Table.from_batches([b for b in batches if b is not None])
    assert got.column("payload").to_pylist() == payloads
    assert got.equals(pa.Table.from_batches([raw_columns_batch(whole)]))  # type: ignore[list-item]
    assert list(split_by_span(whole)) == [whole]  # a 64 MiB span holds it all
