"""Reply framing without sockets: any split of the byte stream gives the same replies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalkd.client._wire import MAX_LINE, ReplyReader, Response
from stalkd.client.errors import ProtocolError

STREAM = (b"INSERTED 1\r\nRESERVED 1 4\r\nab\r\n\r\nFOUND 2 0\r\n\r\n"
          b"OK 18\r\n---\n- default\n- x\n\r\nDELETED\r\nBURIED 9\r\nTIMED_OUT\r\n")
EXPECTED = [
    Response("INSERTED", ("1",)),
    Response("RESERVED", ("1", "4"), b"ab\r\n"),
    Response("FOUND", ("2", "0"), b""),
    Response("OK", ("18",), b"---\n- default\n- x\n"),
    Response("DELETED"),
    Response("BURIED", ("9",)),
    Response("TIMED_OUT"),
]


def drain(reader: ReplyReader) -> list[Response]:
    out = []
    while (r := reader.next()) is not None:
        out.append(r)
    return out


def test_whole_stream_at_once() -> None:
    r = ReplyReader()
    r.feed(STREAM)
    assert drain(r) == EXPECTED
    assert r.buffered == 0


@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_split_gives_the_same_replies(cuts: list[int]) -> None:
    r = ReplyReader()
    got: list[Response] = []
    bounds = [0, *sorted(cuts), len(STREAM)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        r.feed(STREAM[a:b])
        got += drain(r)
    assert got == EXPECTED


def test_byte_by_byte_with_large_body_keeps_memory_bounded() -> None:
    body = bytes(range(256)) * 1000
    stream = b"RESERVED 7 %d\r\n" % len(body) + body + b"\r\n" + b"DELETED\r\n" * 50000
    r = ReplyReader()
    got: list[Response] = []
    for i in range(0, len(stream), 4096):
        r.feed(stream[i:i + 4096])
        got += drain(r)
        assert r.buffered < 4096 + len(body) + 64
    assert got[0] == Response("RESERVED", ("7", str(len(body))), body)
    assert len(got) == 50001


@pytest.mark.parametrize(("data", "match"), [
    (b"x" * (MAX_LINE + 1), "longer than"),
    (b"OK\r\n", "no valid body length"),
    (b"RESERVED 1 abc\r\n", "no valid body length"),
    (b"FOUND 1 2\r\nabXY", "not followed by CRLF"),
    (b"\xff\xfe\r\n", "not ASCII"),
])
def test_garbage_is_a_protocol_error_naming_the_bytes(data: bytes, match: str) -> None:
    r = ReplyReader()
    r.feed(data)
    with pytest.raises(ProtocolError, match=match):
        r.next()
