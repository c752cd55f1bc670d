"""The replication wire format: what is encoded decodes the same however the bytes arrive."""

from __future__ import annotations

import mmap
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalkd.log.frame import KIND_FOOTER, encode_data_frames, encode_frame
from stalkd.replication import wire

payloads = st.lists(st.binary(max_size=300), min_size=1, max_size=20)


def records_message(first: int, batch: list[bytes]) -> bytes:
    return b"".join(bytes(p) for p in wire.encode_records(first, batch))


def frames_message(first: int, batch: list[bytes], base_back: int = 3, epoch: int = 2) -> bytes:
    """``batch`` as the primary's writer frames it at ``first`` in a segment based ``base_back``
    records earlier, in a frames message."""
    base = max(0, first - base_back)
    return wire.encode_frames(first, base, encode_data_frames(batch, first - base, 1_700_000_000, epoch))


encodings = pytest.mark.parametrize("encode", [records_message, frames_message], ids=["records", "frames"])


@given(st.lists(payloads, min_size=1, max_size=5), st.integers(0, 2**40), st.data())
def test_records_survive_any_chunking(batches: list[list[bytes]], first: int, data: st.DataObject) -> None:
    stream = b""
    want = []
    off = first
    for b in batches:  # either encoding, as a primary that catches a standby up then follows its end sends
        encode = data.draw(st.sampled_from([records_message, frames_message]))
        stream += encode(off, b)
        want.append((off, b))
        off += len(b)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    dec = wire.RecordDecoder()
    got = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        got += dec.feed(stream[prev:cut])
        prev = cut
    assert got == want
    assert dec.buffered == 0


@given(st.lists(st.integers(0, 2**63), min_size=1, max_size=10), st.integers(1, 7))
def test_acks_give_the_latest(values: list[int], step: int) -> None:
    stream = b"".join(wire.encode_ack(v) for v in values)
    dec = wire.AckDecoder()
    last = None
    for i in range(0, len(stream), step):
        got = dec.feed(stream[i:i + step])
        if got is not None:
            last = got
    assert last == values[-1]


def test_a_bad_message_is_refused_before_it_is_buffered() -> None:
    with pytest.raises(wire.WireError):
        wire.RecordDecoder().feed(b"X" + b"\0" * 12)
    huge = wire._MSG.pack(ord("R"), wire.MAX_MESSAGE + 1, 0)
    with pytest.raises(wire.WireError):
        wire.RecordDecoder().feed(huge)


@encodings
@given(batch=payloads, data=st.data())
def test_a_flipped_bit_anywhere_in_a_message_is_refused(encode, batch: list[bytes], data: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    msg = bytearray(encode(9, batch))
    bit = data.draw(st.integers(0, len(msg) * 8 - 1))
    msg[bit // 8] ^= 1 << (bit % 8)
    dec = wire.RecordDecoder()
    try:
        got = dec.feed(bytes(msg))
    except wire.WireError:
        return
    assert got == [], "a damaged message was handed on"  # (a length made longer: still waiting)


@pytest.mark.parametrize("damage", ["delta", "crc", "kind"])
def test_a_frame_out_of_place_is_refused_even_when_the_message_crc_matches(damage: str) -> None:
    """The message's CRC only says the bytes crossed the network intact: each frame must also
    be the one expected at its offset, whole, and a data frame (what a reader of the primary's
    segment checks), or the primary sent something its log does not say."""
    frames = bytearray(encode_data_frames([b"abc", b"de"], 2, 7, 1))
    if damage == "delta":  # frames of offsets 11, 12 sent as 12, 13
        msg = wire.encode_frames(12, 9, bytes(frames))
    elif damage == "crc":  # a frame damaged in the primary's page cache
        frames[30] ^= 1
        msg = wire.encode_frames(11, 9, bytes(frames))
    else:  # a segment's footer where a data frame was expected (its CRC is right)
        msg = wire.encode_frames(11, 9, encode_frame(b"abc", 2, 7, 1) + encode_frame(bytes(16), 0, 7, 1, KIND_FOOTER))
    with pytest.raises(wire.WireError, match="fails its checks"):
        wire.RecordDecoder().feed(msg)


def test_heartbeats_carry_the_primary_end_between_records() -> None:
    dec = wire.RecordDecoder()
    got = dec.feed(wire.encode_heartbeat(5) + b"".join(wire.encode_records(5, [b"a"])) + wire.encode_heartbeat(6))
    assert (got, dec.primary_end) == ([(5, [b"a"])], 6)


def test_a_proof_is_bound_to_its_nonce_and_request() -> None:
    secret, req = "k" * 20, wire.encode_request(0, 0)
    n1, n2 = wire.new_nonce(), wire.new_nonce()
    good = wire.encode_auth(secret, n1, req)
    assert wire.check_auth(secret, n1, req, good)
    assert not wire.check_auth(secret, n2, req, good)  # a recorded answer, another connection
    assert not wire.check_auth(secret, n1, wire.encode_request(5, 0), good)


@pytest.mark.parametrize("line", [b"replicate\r\n", b"replicate 1\r\n", b"replicate -1 0\r\n", b"replicate 1 x\r\n",
                                  b"replicate 1 2 x:y\r\n", b"replicate 99999999999999999999 0\r\n"])
def test_bad_requests(line: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.parse_request(line)


def test_replies_and_history_round_trip() -> None:
    line = wire.encode_streaming(3, 120, [(1, 10), (3, 100)])
    r = wire.parse_reply(line)
    assert r.word == "STREAMING" and r.args[:2] == ("3", "120")
    assert wire.parse_history(r.args[2]) == ((1, 10), (3, 100))
    s = wire.parse_reply(wire.encode_snapshot(40, 999, 0, []))
    assert s.args == ("40", "999", "0", "-")
    with pytest.raises(wire.WireError):
        wire.parse_reply(b"OK 5\r\n")


@given(st.binary(max_size=600), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
def test_a_frames_message_is_its_header_then_its_body_with_the_crc32c_of_that_body(
        frames: bytes, first: int, base: int) -> None:  # fmt: skip
    # Compiled, encode_frames stores the fields itself and sums the head's CRC bit by bit: the
    # bytes must be the layout's, whatever is given (it does not look at the frames)
    from stalkd.log.crc import crc32c

    body = struct.pack("<QQ", first, base) + frames
    want = struct.pack("<BII", ord("F"), len(body), crc32c(body)) + body
    assert bytes(wire.encode_frames(first, base, frames)) == want
    assert bytes(wire.encode_frames(first, base, memoryview(frames))) == want


@given(st.binary(max_size=600), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.data())
def test_a_frames_message_of_a_span_is_the_message_of_its_slice(
        data: bytes, first: int, base: int, draw: st.DataObject) -> None:  # fmt: skip
    # The sender's call per message (compiled: the span's bytes copied out of the mapping and
    # summed by the log's C CRC-32C, not the package's): the same bytes as the slice's message
    start = draw.draw(st.integers(0, len(data)))
    end = draw.draw(st.integers(start, len(data)))
    want = bytes(wire.encode_frames(first, base, data[start:end]))
    mv = memoryview(data)
    assert wire.encode_span(first, base, mv, start, end) == want
    assert wire.encode_span(first, base, data, start, end) == want  # (not a view: sliced)
    with mmap.mmap(-1, max(len(data), 1)) as m:  # a mapping, as the log's segments are
        m[: len(data)] = data
        view = memoryview(m)
        try:
            assert wire.encode_span(first, base, view, start, end) == want
        finally:
            view.release()
    mv.release()
    with pytest.raises(ValueError):
        wire.encode_span(first, base, mv, start, end)  # a released mapping is not read
