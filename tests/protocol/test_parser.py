"""Table-driven bytes -> items cases for every command and every parse error (docs/protocol.md, "Framing" and "Commands")."""

from __future__ import annotations

import tracemalloc

import pytest

from stalkd.protocol import NEED_DATA, Parser, accel
from stalkd.protocol.commands import (
    Bury,
    Delete,
    Ignore,
    Kick,
    KickJob,
    ListTubes,
    ListTubesWatched,
    ListTubeUsed,
    PauseTube,
    Peek,
    PeekBuried,
    PeekDelayed,
    PeekReady,
    Put,
    Quit,
    Release,
    Reply,
    Reserve,
    ReserveJob,
    ReserveWithTimeout,
    Stats,
    StatsJob,
    StatsTube,
    Touch,
    Use,
    Watch,
)
from stalkd.protocol.parser import Parser as PyParser

BF = Reply("BAD_FORMAT")
UC = Reply("UNKNOWN_COMMAND")
T200 = "t" * 200
U64 = 2**64 - 1
U32 = 2**32 - 1
# The reference, and its C twin when built (test_speedups_differential holds them to the same items).
PARSERS = [PyParser] + ([accel.CParser] if accel.CParser is not None else [])


def items(data: bytes, max_job_size: int = 65535) -> list[object]:
    p = Parser(max_job_size=max_job_size)
    p.feed(data)
    out = []
    while (item := p.next()) is not NEED_DATA:
        out.append(item)
    return out


# (wire line without CRLF, expected item)
LINES: list[tuple[bytes, object]] = [
    # put is covered with its body below; every other command, good and bad
    (b"peek 1", Peek(1)),
    (b"peek  7", Peek(7)),  # leading spaces are skipped
    (b"peek 0", Peek(0)),
    (b"peek 18446744073709551615", Peek(U64)),
    (b"peek 18446744073709551616", BF),
    (b"peek " + b"9" * 50, BF),
    (b"peek foo111", BF),
    (b"peek 111foo", BF),
    (b"peek -1", BF),
    (b"peek +1", BF),
    (b"peek 1 ", BF),
    (b"peek ", BF),
    (b"peek", UC),
    (b"peek-ready", PeekReady()),
    (b"peek-ready ", BF),
    (b"peek-readyx", BF),
    (b"peek-delayed", PeekDelayed()),
    (b"peek-delayed 1", BF),
    (b"peek-buried", PeekBuried()),
    (b"peek-buriedx", BF),
    (b"peek-x", UC),
    (b"reserve", Reserve()),
    (b"reserve ", BF),
    (b"reservex", BF),
    (b"reserve-with-timeout", BF),  # matches "reserve", then fails the exact length
    (b"reserve-with-timeout 0", ReserveWithTimeout(0)),
    (b"reserve-with-timeout   3", ReserveWithTimeout(3)),
    (b"reserve-with-timeout 5abc", ReserveWithTimeout(5)),  # trailing text ignored
    (b"reserve-with-timeout 5 6", ReserveWithTimeout(5)),
    (b"reserve-with-timeout 2147483647", ReserveWithTimeout(2147483647)),
    (b"reserve-with-timeout 2147483648", BF),  # 1.13: > INT_MAX is BAD_FORMAT
    (b"reserve-with-timeout 4294967296", BF),
    (b"reserve-with-timeout -1", BF),
    (b"reserve-with-timeout x", BF),
    (b"reserve-job 3", ReserveJob(3)),
    (b"reserve-job", BF),  # matches "reserve"
    (b"reserve-job 3x", BF),
    (b"delete 1", Delete(1)),
    (b"delete 1 ", BF),
    (b"delete", UC),
    (b"delete 18446744073709551616", BF),
    (b"release 1 2 3", Release(1, 2, 3)),
    (b"release  1  2  3", Release(1, 2, 3)),
    (b"release 1 4294967295 4294967295", Release(1, U32, U32)),
    (b"release 1 4294967296 0", BF),
    (b"release 1 2 4294967296", BF),
    (b"release 1 2", BF),
    (b"release 1x 2 3", BF),
    (b"release 1 2x 3", BF),
    (b"release 1 2 3x", BF),
    (b"release 1 2 3 ", BF),
    (b"release", UC),
    (b"bury 1 2", Bury(1, 2)),
    (b"bury 111abc 2", BF),
    (b"bury 111", BF),
    (b"bury 111 222abc", BF),
    (b"kick 5", Kick(5)),
    (b"kick 1abc", Kick(1)),  # strtoul stops at the first non-digit
    (b"kick -1", Kick(U32)),  # strtoul wraps negatives; beanstalkd keeps 32 bits
    (b"kick +2", Kick(2)),
    (b"kick \t3", Kick(3)),  # strtoul skips any C whitespace
    (b"kick 4294967296", Kick(0)),  # truncated to 32 bits
    (b"kick 18446744073709551615", Kick(U32)),
    (b"kick 18446744073709551616", BF),  # ERANGE
    (b"kick x", BF),
    (b"kick ", BF),
    (b"kick", UC),
    (b"kick-job 3", KickJob(3)),
    (b"kick-job a111", BF),
    (b"kick-job 111a", BF),
    (b"kick-job !@#", BF),
    (b"kick-jobs 3", UC),
    (b"touch 3", Touch(3)),
    (b"touch 100000000000000", Touch(100000000000000)),
    (b"touch a111", BF),
    (b"touch 111a", BF),
    (b"stats-job 4", StatsJob(4)),
    (b"stats-job 111ABC", BF),
    (b"stats-job 111 222", BF),
    (b"stats-job", BF),  # matches "stats"
    (b"stats-tube default", StatsTube("default")),
    (b"stats-tube", BF),
    (b"stats-tube ", BF),
    (b"stats-tube a b", BF),
    (b"stats", Stats()),
    (b"stats ", BF),
    (b"statsx", BF),
    (b"use x_y", Use("x_y")),
    (b"use " + T200.encode(), Use(T200)),
    (b"use " + b"t" * 201, BF),
    (b"use ABCabc019-+/;.$_()", Use("ABCabc019-+/;.$_()")),
    (b"use -a", BF),  # must not start with '-'
    (b"use a-", Use("a-")),
    (b"use ", BF),
    (b"use  x", BF),
    (b"use foo bar", BF),
    (b"use a*b", BF),
    (b"use \xff", BF),
    (b"use", UC),
    (b"USE x", UC),  # command names are case-sensitive
    (b"watch w", Watch("w")),
    (b"watch w ", BF),
    (b"ignore w", Ignore("w")),
    (b"ignore", UC),
    (b"list-tubes", ListTubes()),
    (b"list-tubes ", BF),
    (b"list-tubesx", BF),
    (b"list-tube-used", ListTubeUsed()),
    (b"list-tube-usedx", BF),
    (b"list-tubes-watched", ListTubesWatched()),
    (b"list-tubes-watched x", BF),
    (b"list-tube", UC),
    (b"quit", Quit()),
    (b"quitx", Quit()),  # pure prefix match
    (b"quit now", Quit()),
    (b"pause-tube default 1", PauseTube("default", 1)),
    (b"pause-tube default 0", PauseTube("default", 0)),
    (b"pause-tube " + T200.encode() + b" 4294967295", PauseTube(T200, U32)),  # the longest command
    (b"pause-tube " + b"t" * 201 + b" 1", BF),
    (b"pause-tube   a   2", PauseTube("a", 2)),
    (b"pause-tubea 2", PauseTube("a", 2)),  # no space needed after the prefix
    (b"pause-tube -a 2", BF),
    (b"pause-tube a", BF),
    (b"pause-tube a5", BF),
    (b"pause-tube a 2 ", BF),
    (b"pause-tube a 4294967296", BF),
    (b"pause-tube a*b 2", BF),
    (b"pause-tube", BF),
    (b"", UC),
    (b"foo", UC),
    (b" put 0 0 0 0", UC),
    (b"use a\0b", BF),  # NUL in the line
    (b"\0", BF),
]


@pytest.mark.parametrize(("line", "expected"), LINES, ids=[repr(x[0][:40]) for x in LINES])
def test_line(line: bytes, expected: object) -> None:
    assert items(line + b"\r\n") == [expected]


# (whole input, max job size, expected items) for put, bodies and framing
STREAMS: list[tuple[bytes, int, list[object]]] = [
    (b"put 1 2 3 5\r\nhello\r\n", 65535, [Put(1, 2, 3, b"hello")]),
    (b"put 0 0 0 0\r\n\r\n", 65535, [Put(0, 0, 1, b"")]),  # zero-byte job; ttr 0 -> 1
    (b"put 4294967295 4294967295 4294967295 1\r\nx\r\n", 65535, [Put(U32, U32, U32, b"x")]),
    (b"put  1  2  3  1\r\n\r\r\n", 65535, [Put(1, 2, 3, b"\r")]),
    (b"put 0 0 1 4\r\n\r\n\r\n\r\n", 65535, [Put(0, 0, 1, b"\r\n\r\n")]),  # bodies are opaque
    (b"put 0 0 1 3\r\n\x00\xff\n\r\n", 65535, [Put(0, 0, 1, b"\x00\xff\n")]),
    (b"put -1 0 0 0\r\n", 65535, [BF]),
    (b"put 512 -1 100 0\r\n", 65535, [BF]),
    (b"put -1kkdj9djjkd9 0 0 0\r\n", 65535, [BF]),
    (b"put 4294967296 0 0 0\r\n", 65535, [BF]),
    (b"put 0 0 0 4294967296\r\n", 65535, [BF]),
    (b"put 0 0 0 10b\r\n", 65535, [Put(0, 0, 0, b"", "BAD_FORMAT")]),  # counted, then refused
    (b"put 0 0 0 --!@#$%^&&**()\r\n", 65535, [BF]),
    (b"put 0 0 0\r\n", 65535, [BF]),
    (b"put\r\n", 65535, [UC]),
    # Text after the size: a counted put refused BAD_FORMAT, and no body skip after it
    (b"put 0 0 1 2 \r\nhi\r\n", 65535, [Put(0, 0, 1, b"", "BAD_FORMAT"), UC]),
    (b"put 0 0 1 2x\r\nuse t\r\n", 65535, [Put(0, 0, 1, b"", "BAD_FORMAT"), Use("t")]),
    # JOB_TOO_BIG skips exactly <bytes>+2, even when the line also has trailing text
    (b"put 0 0 0 11\r\ndelete 9999\r\nput 0 0 0 1\r\na\r\n", 10,
     [Put(0, 0, 0, b"", "JOB_TOO_BIG"), Put(0, 0, 1, b"a")]),
    (b"put 0 0 0 11x\r\ndelete 9999\r\nuse t\r\n", 10, [Put(0, 0, 0, b"", "JOB_TOO_BIG"), Use("t")]),
    (b"put 0 0 60 65536\r\n" + b"a" * 65536 + b"\r\nuse t\r\n", 65535,
     [Put(0, 0, 60, b"", "JOB_TOO_BIG"), Use("t")]),
    (b"put 0 0 60 65535\r\n" + b"a" * 65535 + b"\r\n", 65535, [Put(0, 0, 60, b"a" * 65535)]),
    # EXPECTED_CRLF consumes exactly <bytes>+2; the leftover is parsed as commands
    (b"put 0 0 0 3\r\nabcd\r\nuse t\r\n", 65535,
     [Put(0, 0, 1, b"", "EXPECTED_CRLF"), UC]),  # "\nuse t" is glued: UNKNOWN_COMMAND
    (b"put 0 0 0 2\r\nabcdstats\r\n", 65535, [Put(0, 0, 1, b"", "EXPECTED_CRLF"), Stats()]),
    # pipelining
    (b"use a\r\nuse b\r\n", 65535, [Use("a"), Use("b")]),
    (b"put 0 0 1 1\r\na\r\nput 0 0 1 1\r\nb\r\nreserve\r\n", 65535,
     [Put(0, 0, 1, b"a"), Put(0, 0, 1, b"b"), Reserve()]),
    # line limit: 224 bytes including CRLF is the longest line
    (b"use " + b"t" * 218 + b"\r\n", 65535, [BF]),  # 224 bytes: parsed, name too long
    (b"x" * 500 + b"\r\nput 0 0 0 1\r\na\r\n", 65535, [BF, Put(0, 0, 1, b"a")]),
    (b"x" * 222 + b"\r\nuse a\r\n", 65535, [UC, Use("a")]),
    # 223 chars + CRLF: the CR is the 224th byte, thrown away with the window, so the next
    # line end found is use a's, and one BAD_FORMAT covers both lines (as beanstalkd does)
    (b"x" * 223 + b"\r\nuse a\r\nuse b\r\n", 65535, [BF, Use("b")]),
    (b"x" * 448 + b"\r\nuse a\r\n", 65535, [BF, Use("a")]),
    # a bare CR: the line end is the first CR of the window, so this line never ends inside it
    (b"use a\rb\r\n" + b"y" * 215 + b"\r\nuse c\r\n", 65535, [BF, Use("c")]),
    (b"\n\r\n", 65535, [UC]),
]


@pytest.mark.parametrize(("data", "limit", "expected"), STREAMS, ids=[repr(s[0][:30]) for s in STREAMS])
def test_stream(data: bytes, limit: int, expected: list[object]) -> None:
    assert items(data, limit) == expected


def test_incomplete_inputs_need_data_and_hold_nothing_extra() -> None:
    p = Parser()
    for chunk in (b"us", b"e t", b"ube\r"):
        p.feed(chunk)
        assert p.next() is NEED_DATA
    p.feed(b"\n")
    assert p.next() == Use("tube")
    assert p.next() is NEED_DATA
    assert p.buffered == 0


def test_bare_cr_waits_for_the_full_window() -> None:
    # "use a\rb\r\n" cannot end inside its window; beanstalkd waits for 224 bytes.
    p = Parser()
    p.feed(b"use a\rb\r\nuse c\r\n")
    assert p.next() is NEED_DATA


def test_too_big_body_is_dropped_without_buffering() -> None:
    # Given a 1 GiB body announced to a parser with the default 64 KiB limit
    p = Parser()
    size = 2**30
    p.feed(b"put 0 0 10 %d\r\n" % size)
    assert p.next() is NEED_DATA
    chunk = b"z" * (1 << 20)
    # When the body arrives in 1 MiB reads
    for _ in range(size // len(chunk)):
        p.feed(chunk)
        # Then nothing of it is held
        assert p.buffered == 0
    assert p.next() is NEED_DATA
    p.feed(b"\r\nuse t\r\n")
    assert p.next() == Put(0, 0, 10, b"", "JOB_TOO_BIG")
    assert p.next() == Use("t")


def test_large_body_arriving_in_small_reads_is_joined_once() -> None:
    p = Parser(max_job_size=2**20)
    body = bytes(range(256)) * 4096
    p.feed(b"put 0 0 1 %d\r\n" % len(body))
    for i in range(0, len(body), 1000):
        p.feed(body[i : i + 1000])
        assert p.next() is NEED_DATA
    p.feed(b"\r\n")
    assert p.next() == Put(0, 0, 1, body)
    assert p.buffered == 0


@pytest.mark.parametrize("cls", PARSERS)
def test_big_body_is_not_copied_twice(cls: type[PyParser]) -> None:
    # Given a 4 MiB put arriving in 64 KiB reads (a server's reads of one big put)
    body = bytes(range(256)) * (2**22 // 256)
    reads = [b"put 0 0 1 %d\r\n" % len(body)]
    reads += [body[i : i + 65536] for i in range(0, len(body), 65536)] + [b"\r\nuse t\r\n"]
    p = cls(max_job_size=2**23)
    tracemalloc.start()
    try:
        items: list[object] = []
        for r in reads:
            p.feed(r)
            while (item := p.next()) is not NEED_DATA:
                items.append(item)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Then the body is built once, not joined with the stream and sliced out of it (nor, in the
    # C parser, grown by doubling and copied out): the parser's allocations stay near one body
    assert items == [Put(0, 0, 1, body), Use("t")]
    assert peak < 1.25 * len(body)


@pytest.mark.parametrize("cls", PARSERS)
def test_a_big_body_completes_without_a_copy(cls: type[PyParser]) -> None:
    # Given a 4 MiB put whose body has arrived in 64 KiB reads, all but its CRLF
    body = bytes(range(256)) * (2**22 // 256)
    p = cls(max_job_size=2**23)
    tracemalloc.start()
    try:
        p.feed(b"put 0 0 1 %d\r\n" % len(body))
        for i in range(0, len(body), 65536):
            p.feed(body[i : i + 65536])
            assert p.next() is NEED_DATA
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        # When the CRLF comes and the put is taken
        p.feed(b"\r\nuse t\r\n")
        put, use = p.next(), p.next()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Then the body was already in place: completing it allocated nothing near its size (a
    # join of its reads there is a copy of 4 MiB into fresh pages, in one loop turn)
    assert put == Put(0, 0, 1, body) and use == Use("t")
    assert held >= len(body)
    assert peak - held < len(body) // 16


def test_max_job_size_bounds() -> None:
    assert Parser(max_job_size=2**30).max_job_size == 2**30
    with pytest.raises(ValueError, match="max_job_size"):
        Parser(max_job_size=2**30 + 1)
    with pytest.raises(ValueError, match="max_job_size"):
        Parser(max_job_size=-1)


def test_max_job_size_can_change_between_commands() -> None:
    p = Parser(max_job_size=1)
    p.feed(b"put 0 0 1 2\r\nab\r\n")
    assert p.next() == Put(0, 0, 1, b"", "JOB_TOO_BIG")
    p.max_job_size = 2
    p.feed(b"put 0 0 1 2\r\nab\r\n")
    assert p.next() == Put(0, 0, 1, b"ab")


def test_feed_accepts_bytearray_and_memoryview() -> None:
    p = Parser()
    p.feed(bytearray(b"use a\r\n"))
    p.feed(memoryview(b"use b\r\n"))
    assert [p.next(), p.next()] == [Use("a"), Use("b")]


def test_fast_put_values_equal_constructed_ones() -> None:
    got = items(b"put 1 2 3 2\r\nab\r\n")[0]
    want = Put(1, 2, 3, b"ab")
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want)
    with pytest.raises(AttributeError):
        got.pri = 5  # type: ignore[misc]  # still frozen


# --- stalkd's own body command: result-put (beanstalkd answers UNKNOWN_COMMAND) -------------


def test_result_put_reads_its_body_in_any_chunking() -> None:
    from stalkd.protocol.commands import ResultGet, ResultPut  # noqa: PLC0415 - stalkd's own

    data = b"result-put 3 60 5\r\nhe\r\nl\r\nresult-get 3\r\n"
    for cut in range(1, len(data)):
        p = Parser()
        items: list[object] = []
        for part in (data[:cut], data[cut:]):
            p.feed(part)
            while (item := p.next()) is not NEED_DATA:
                items.append(item)
        assert items == [ResultPut(3, 60, b"he\r\nl"), ResultGet(3)], cut


def test_result_put_errors_are_values_and_the_stream_stays_in_step() -> None:
    from stalkd.protocol.commands import ResultPut

    p = Parser(max_job_size=4)
    p.feed(b"result-put 1 1 9\r\n123456789\r\nresult-put 1 1 2\r\nabc\r\n"
           b"result-put 1 x 2\r\nresult-put 1 1 4294967296\r\nresult-put 1 1 1 \r\nquit\r\n")
    got = [p.next() for _ in range(6)]
    assert got[:2] == [ResultPut(1, 1, b"", "JOB_TOO_BIG"), ResultPut(1, 1, b"", "EXPECTED_CRLF")]
    # "abc\r\n": the EXPECTED_CRLF body took "ab" and "c\r"; "\n" joins the next line
    assert got[2:] == [UC, BF, BF, Quit()]
