"""The C accelerator against the pure-Python reference: the same byte streams, split at random,
must give the same items, hold the same bytes, and drive an engine to the same replies and
state; the reply encoder must give the same bytes. Skipped when the extension is not built
(``STALKD_NO_EXTENSIONS=1`` or no compiler); test_accel.py checks it is built when it should be.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stalkd.engine import Engine
from stalkd.protocol import NEED_DATA, accel
from stalkd.protocol import commands as C
from stalkd.protocol.grammar import COMMANDS, LINE_MAX
from stalkd.protocol.parser import BIG_BODY
from stalkd.protocol.parser import Parser as PyParser
from stalkd.protocol.replies import encode_line as py_encode_line
from stalkd.protocol.replies import encode_reply
from stalkd.protocol.replies import encode_reply_parts as py_encode_reply_parts

pytestmark = pytest.mark.skipif(accel.CParser is None, reason="the C accelerator is not active")

T0 = 1_700_000_000.0
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_num = st.one_of(
    st.integers(0, 300).map(str),
    st.sampled_from(["4294967295", "4294967296", "18446744073709551615", "18446744073709551616",
                     "2147483647", "2147483648", "-1", "+1", "-0", "007", "", "99999999999999999999999"]),
    st.text("0123456789 +-ab\t\x0b", max_size=6),
)  # fmt: skip
_name = st.one_of(st.sampled_from(["default", "a", "x_y", "-a", "a b", "t" * 200, "t" * 201, ""]),
                  st.text("abAB09-+/;.$_()*\x00", max_size=8))  # fmt: skip
_word = st.sampled_from([s.prefix.decode() for s in COMMANDS]
                        + [s.prefix.decode().strip() for s in COMMANDS] + ["PUT ", "x", "reservex"])


@st.composite
def _line(draw: st.DrawFn) -> bytes:
    args = draw(st.lists(st.one_of(_num, _name), max_size=5))
    sep = draw(st.sampled_from([" ", "  ", "", "\t"]))
    return (draw(_word) + sep.join(args)).encode()


@st.composite
def _put(draw: st.DrawFn) -> bytes:
    size = draw(st.integers(0, 45))
    body = draw(st.binary(max_size=size + 3))
    nums = draw(st.sampled_from(["1 2 %d", "%d", "1  2 %d", "4294967296 0 %d", "0 0 %d"]))
    trail = draw(st.sampled_from([b"", b" ", b"x", b"\0"]))
    return b"put " + (nums % draw(st.integers(0, 3))).encode() + b" %d%s\r\n%s\r\n" % (size, trail, body)


_fragment = st.one_of(
    _line().map(lambda b: b + b"\r\n"),
    _put(),
    st.binary(max_size=30),
    st.lists(st.sampled_from([b"\r", b"\n", b"\r\n", b"a", b" ", b"\0"]), max_size=8).map(b"".join),
    st.integers(LINE_MAX - 30, LINE_MAX * 3).map(lambda n: b"y" * n),
)
_stream = st.lists(_fragment, max_size=14).map(b"".join)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:], strict=False)]


def _run(cls: type, chunks: list[bytes], limit: int) -> list[object]:
    """Items, and after every chunk what the parser holds and its framing state."""
    p = cls(max_job_size=limit)
    out: list[object] = []
    for chunk in chunks:
        p.feed(chunk)
        while (item := p.next()) is not NEED_DATA:
            out.append(item)
        out.append(("held", p.buffered, p._state))
    return out


def _both(chunks: list[bytes], limit: int) -> list[object]:
    assert accel.CParser is not None
    want = _run(PyParser, chunks, limit)
    got = _run(accel.CParser, chunks, limit)
    assert got == want
    # equal values of the same types (a dataclass compares its type too, but be explicit)
    assert [type(x) for x in got] == [type(x) for x in want]
    return want


@SETTINGS
@given(_stream, st.lists(st.integers(0, 10_000), max_size=20), st.sampled_from([0, 10, 40, 65535]))
def test_same_items_for_any_stream_and_split(data: bytes, cuts: list[int], limit: int) -> None:
    _both(_split(data, cuts), limit)


@settings(SETTINGS, max_examples=40)
@given(_stream)
def test_same_items_byte_at_a_time(data: bytes) -> None:
    _both([data[i : i + 1] for i in range(len(data))], 40)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=700), st.lists(st.integers(0, 10_000), max_size=8), st.integers(0, 100))
def test_same_items_for_hostile_bytes(data: bytes, cuts: list[int], limit: int) -> None:
    _both(_split(data, cuts), limit)


def test_every_command_canonical_and_mangled() -> None:
    # each table row with good, bad and boundary arguments, whole and split at every byte
    args = ["", "0", "1", "4294967295", "4294967296", "18446744073709551615",
            "18446744073709551616", "2147483648", "-1", "x", "a b", "t" * 201, "1abc", " 1"]  # fmt: skip
    lines = []
    for spec in COMMANDS:
        for a in args:
            for n in range(len(spec.args) + 2):
                lines.append(spec.prefix + " ".join([a] * n).encode() + b"\r\n")
    lines.append(b"put 1 2 3 4\r\nbody\r\n")
    data = b"".join(lines)
    _both([data], 65535)
    rng = random.Random(12)
    for _ in range(30):
        _both(_split(data, [rng.randrange(len(data)) for _ in range(200)]), 3)


def test_a_large_body_in_small_reads() -> None:
    body = bytes(range(256)) * 400
    data = b"put 0 0 1 %d\r\n%s\r\ndelete 1\r\n" % (len(body), body)
    items = _both([data[i : i + 1000] for i in range(0, len(data), 1000)], 2**20)
    assert C.Put(0, 0, 1, body) in items and C.Delete(1) in items
    # too big: counted down as it arrives, never held
    items = _both([data[i : i + 1000] for i in range(0, len(data), 1000)], 100)
    assert items[-2] == C.Delete(1) and all(h[1] < LINE_MAX for h in items if type(h) is tuple)


def test_big_bodies_received_apart_alike() -> None:
    # bodies of BIG_BODY bytes or more arrive into their own object: the same items, the same
    # bytes held after every read, whatever the split, a bad CRLF and a result-put's body too
    body = bytes(range(256)) * (BIG_BODY // 256) + b"tail"
    data = (b"put 1 2 3 %d\r\n%s\r\npeek 1\r\n" % (len(body), body)
            + b"put 0 0 1 %d\r\n%sXYuse a\r\n" % (len(body), body)
            + b"put 0 0 1 %d\r\n%s\r\n" % (BIG_BODY - 1, body[: BIG_BODY - 1]))
    rng = random.Random(30)
    for cuts in ([], [13], [len(data) - 1], [rng.randrange(len(data)) for _ in range(40)],
                 list(range(0, len(data), 65536))):
        items = [x for x in _both(_split(data, cuts), 2 * BIG_BODY) if type(x) is not tuple]
        assert items[:2] == [C.Put(1, 2, 3, body), C.Peek(1)]
        assert items[2] == C.Put(0, 0, 1, b"", "EXPECTED_CRLF")
        assert items[-1] == C.Put(0, 0, 1, body[: BIG_BODY - 1])


def test_max_job_size_is_checked_alike() -> None:
    assert accel.CParser is not None
    for cls in (PyParser, accel.CParser):
        p = cls(max_job_size=2**30)
        assert p.max_job_size == 2**30
        p.max_job_size = 5
        assert p.max_job_size == 5
        for bad in (-1, 2**30 + 1):
            with pytest.raises(ValueError):
                cls(max_job_size=bad)
            with pytest.raises(ValueError):
                p.max_job_size = bad


_reply = st.one_of(
    st.builds(C.Reply, st.sampled_from(["INSERTED", "DELETED", "USING", "WATCHING", "KICKED",
                                        "BURIED", "NOT_FOUND", "OK", "X_Y"]),
              st.lists(st.one_of(st.integers(0, 2**64), st.integers(-5, 5),
                                 st.text("abc-_09", min_size=1, max_size=10)),
                       max_size=3).map(tuple)),
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(_reply)
def test_reply_lines_encode_alike(reply: C.Reply) -> None:
    assert accel.speedups is not None
    assert accel.speedups.encode_line(reply) == py_encode_line(reply) == encode_reply(reply)
    assert accel.speedups.encode_reply_parts(reply) == py_encode_reply_parts(reply)


def _engine_reply(cmd: C.Command) -> C.AnyReply:
    e = Engine()
    e.connect(1, T0)
    e.apply(1, C.Put(1, 0, 5, b"x"), T0)
    reply = e.apply(1, cmd, T0).reply
    assert reply is not None
    return reply


_other_reply = st.one_of(
    st.builds(C.JobReply, st.sampled_from(["RESERVED", "FOUND"]), st.integers(0, 2**64 - 1),
              st.binary(max_size=70)),
    st.builds(C.JobReply, st.just("RESERVED"), st.integers(2**64, 2**70), st.binary(max_size=3)),
    st.builds(C.YamlList, st.lists(st.text("abc", min_size=1, max_size=5), max_size=3).map(tuple)),
    st.builds(lambda: _engine_reply(C.StatsTube("default"))),
    st.builds(lambda: _engine_reply(C.StatsJob(1))),
    st.just(C.Close()),
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(_other_reply)
def test_job_and_yaml_replies_encode_alike(reply: C.AnyReply) -> None:
    assert accel.speedups is not None
    got = accel.speedups.encode_reply_parts(reply)
    assert got == py_encode_reply_parts(reply)
    assert b"".join(got) == encode_reply(reply)
    if type(reply) is C.JobReply:
        assert got[1] is reply.body  # the body is not copied


def test_not_a_reply_is_refused_alike() -> None:
    assert accel.speedups is not None
    for bad in (None, 5, C.Put(0, 0, 1, b"")):
        with pytest.raises(TypeError):
            accel.speedups.encode_reply_parts(bad)
        with pytest.raises(TypeError):
            py_encode_reply_parts(bad)  # type: ignore[arg-type]


def _drive(items: list[object], encode_line: Callable[[C.Reply], bytes],
           encode_parts: Callable[[C.AnyReply], tuple[bytes, ...]]) -> tuple[list[bytes], list[tuple[object, ...]], object]:  # fmt: skip
    """Commands from one parser through an engine, two connections taking turns: the reply
    bytes (through the encoders under test), the jobs and the stats."""
    e = Engine(max_job_size=40)
    now = T0
    for cid in (1, 2):
        e.connect(cid, now)
    out: list[bytes] = []
    cid = 1
    for item in items:
        if type(item) is tuple:  # a chunk boundary: let time pass, run timers, switch
            now += 0.7
            e.tick(now)
            cid = 3 - cid
            continue
        if type(item) is C.Reply:
            out.append(encode_line(item))
            continue
        if type(item) in (C.Quit, C.Reserve, C.ReserveWithTimeout):
            continue  # would end or block the scripted connection
        if type(item) is C.Stats:
            continue  # the server completes it (pid, uptime, role...): the engine's alone cannot be encoded
        reply = e.apply(cid, item, now).reply  # type: ignore[arg-type]
        if reply is not None:
            out.append(encode_line(reply) if type(reply) is C.Reply else b"".join(encode_parts(reply)))
    jobs = [(j.id, j.tube.name, j.state.name, j.pri, j.delay, j.ttr, j.body, j.deadline_us,
             j.reserves, j.releases, j.buries, j.kicks) for j in e.iter_jobs()]  # fmt: skip
    return out, sorted(jobs), e.apply(1, C.Stats(), now).reply



@SETTINGS
@given(_stream, st.lists(st.integers(0, 10_000), max_size=10))
def test_same_replies_and_engine_state(data: bytes, cuts: list[int]) -> None:
    assert accel.CParser is not None and accel.speedups is not None
    chunks = _split(b"use a\r\nput 5 0 1 2\r\nhi\r\nreserve-job 1\r\n" + data, cuts)
    want = _drive(_run(PyParser, chunks, 40), py_encode_line, py_encode_reply_parts)
    got = _drive(_run(accel.CParser, chunks, 40), accel.speedups.encode_line,
                 accel.speedups.encode_reply_parts)
    assert got == want
    assert want[0]  # the prefix alone makes replies: the comparison is never vacuous
