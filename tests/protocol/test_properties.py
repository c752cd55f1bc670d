"""Hypothesis properties: chunking never changes the items, nothing raises, and the parser
agrees with a literal model of beanstalkd's C input handling (tests/protocol/cmodel.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from stalkd.protocol import NEED_DATA, Parser
from stalkd.protocol.grammar import COMMANDS
from stalkd.protocol.lines import EXACT, SPACED, match_command

from .cmodel import CModel

LIMIT = 40  # a small max job size, so JOB_TOO_BIG paths are common

_num = st.one_of(
    st.integers(0, 300).map(str),
    st.sampled_from(["4294967295", "4294967296", "18446744073709551616", "-1", "+1", "2147483648", "007", ""]),
    st.text("0123456789 ab-", max_size=6),
)
_name = st.one_of(st.sampled_from(["default", "a", "x_y", "-a", "a b", "t" * 200, "t" * 201, ""]),
                  st.text("abAB09-+/;.$_()*", max_size=8))
# beanstalkd's commands only: the C model is beanstalkd (stalkd's own are tested in test_parser)
_cmd_word = st.sampled_from([s.prefix.decode() for s in COMMANDS if not s.own] + ["kick", "use", "peek", "PUT ", "x"])


@st.composite
def _line(draw: st.DrawFn) -> bytes:
    word = draw(_cmd_word)
    args = draw(st.lists(st.one_of(_num, _name), max_size=4))
    sep = draw(st.sampled_from([" ", "  ", ""]))
    return (word + sep.join(args)).encode()


@st.composite
def _put(draw: st.DrawFn) -> bytes:
    size = draw(st.integers(0, LIMIT + 5))
    body = draw(st.binary(min_size=0, max_size=size + 3))
    ttr = draw(st.integers(0, 3))
    trail = draw(st.sampled_from([b"", b" ", b"x"]))
    return b"put 1 2 %d %d%s\r\n%s\r\n" % (ttr, size, trail, body)


_fragment = st.one_of(
    _line().map(lambda b: b + b"\r\n"),
    _put(),
    st.binary(max_size=30),
    st.lists(st.sampled_from([b"\r", b"\n", b"\r\n", b"a", b" ", b"\0"]), max_size=8).map(b"".join),
    st.integers(200, 700).map(lambda n: b"y" * n),
)
_stream = st.lists(_fragment, max_size=12).map(b"".join)


def _items(chunks: list[bytes], limit: int = LIMIT) -> list[object]:
    p = Parser(max_job_size=limit)
    out: list[object] = []
    for c in chunks:
        p.feed(c)
        while (item := p.next()) is not NEED_DATA:
            out.append(item)
    return out


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:], strict=False)]


FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(_stream, st.lists(st.integers(0, 10_000), max_size=20))
def test_any_split_gives_the_same_items(data: bytes, cuts: list[int]) -> None:
    assert _items(_split(data, cuts)) == _items([data])


@FAST
@given(_stream)
def test_byte_at_a_time_gives_the_same_items(data: bytes) -> None:
    assert _items([data[i : i + 1] for i in range(len(data))]) == _items([data])


@FAST
@given(_stream, st.lists(st.integers(0, 10_000), max_size=20))
def test_agrees_with_the_c_model(data: bytes, cuts: list[int]) -> None:
    assume(not any(s.prefix in data for s in COMMANDS if s.own))  # beanstalkd has no such command
    chunks = _split(data, cuts)
    assert _items(chunks) == CModel(LIMIT).run(chunks)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=600), st.integers(0, 100))
def test_random_bytes_never_raise(data: bytes, limit: int) -> None:
    p = Parser(max_job_size=limit)
    p.feed(data)
    for _ in range(len(data) + 2):
        if p.next() is NEED_DATA:
            break
    else:
        raise AssertionError("parser made no progress guarantee: more items than bytes")


@settings(max_examples=500, deadline=None)
@given(_line())
def test_fast_command_lookup_equals_the_ordered_prefix_scan(line: bytes) -> None:
    # The parser's dict lookups must pick the same row as beanstalkd's ordered strncmp scan.
    sp = line.find(b" ")
    expected = match_command(line)
    if sp > 0 and line[:sp] in SPACED:
        assert expected is not None and (expected + " ").encode() == line[: sp + 1]
    if sp < 0 and line in EXACT:
        assert expected == line.decode()


def test_spaced_prefixes_are_never_shadowed_by_earlier_rows() -> None:
    for i, spec in enumerate(COMMANDS):
        for earlier in COMMANDS[:i]:
            assert not spec.prefix.startswith(earlier.prefix), (spec.name, earlier.name)
