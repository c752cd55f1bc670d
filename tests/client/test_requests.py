"""The command table without sockets: wire bytes, argument checks, reply words to results."""

from __future__ import annotations

from typing import Any

import pytest

from stalkd.client import _requests as rq
from stalkd.client import errors
from stalkd.client._address import Address, parse_address
from stalkd.client._wire import Response
from stalkd.client.job import Job

# (request, wire bytes, success reply, decoded result)
CASES: list[tuple[rq.Request[Any], bytes, Response, object]] = [
    (rq.put(b"hi", 1, 2, 3), b"put 1 2 3 2\r\nhi\r\n", Response("INSERTED", ("9",)), 9),
    (rq.put(b"", 0, 0, 0), b"put 0 0 0 0\r\n\r\n", Response("INSERTED", ("1",)), 1),
    (rq.use("a_b"), b"use a_b\r\n", Response("USING", ("a_b",)), "a_b"),
    (rq.reserve(None), b"reserve\r\n", Response("RESERVED", ("4", "1"), b"x"), Job(4, b"x")),
    (rq.reserve(0), b"reserve-with-timeout 0\r\n", Response("RESERVED", ("4", "0"), b""), Job(4, b"")),
    (rq.reserve(2.1), b"reserve-with-timeout 3\r\n", Response("RESERVED", ("4", "0"), b""), Job(4, b"")),
    (rq.reserve_job(Job(5, b"")), b"reserve-job 5\r\n", Response("RESERVED", ("5", "0"), b""), Job(5, b"")),
    (rq.delete(2**64 - 1), b"delete 18446744073709551615\r\n", Response("DELETED"), None),
    (rq.release(3, 10, 0.5), b"release 3 10 1\r\n", Response("RELEASED"), None),
    (rq.bury(3, 4294967295), b"bury 3 4294967295\r\n", Response("BURIED"), None),
    (rq.touch(3), b"touch 3\r\n", Response("TOUCHED"), None),
    (rq.watch("w"), b"watch w\r\n", Response("WATCHING", ("2",)), 2),
    (rq.ignore("w"), b"ignore w\r\n", Response("WATCHING", ("1",)), 1),
    (rq.peek(7), b"peek 7\r\n", Response("FOUND", ("7", "1"), b"z"), Job(7, b"z")),
    (rq.peek_ready(), b"peek-ready\r\n", Response("FOUND", ("7", "0"), b""), Job(7, b"")),
    (rq.peek_delayed(), b"peek-delayed\r\n", Response("FOUND", ("7", "0"), b""), Job(7, b"")),
    (rq.peek_buried(), b"peek-buried\r\n", Response("FOUND", ("7", "0"), b""), Job(7, b"")),
    (rq.kick(100), b"kick 100\r\n", Response("KICKED", ("3",)), 3),
    (rq.kick_job(8), b"kick-job 8\r\n", Response("KICKED"), None),
    (rq.stats_job(8), b"stats-job 8\r\n", Response("OK", ("8",), b"---\nid: 8\n"), {"id": 8}),
    (rq.stats_tube("t"), b"stats-tube t\r\n", Response("OK", ("0",), b"---\nname: 1\n"), {"name": "1"}),
    (rq.stats(), b"stats\r\n", Response("OK", ("0",), b"---\ncmd-put: 1\n"), {"cmd-put": 1}),
    (rq.list_tubes(), b"list-tubes\r\n", Response("OK", ("0",), b"---\n- a\n"), ["a"]),
    (rq.list_tube_used(), b"list-tube-used\r\n", Response("USING", ("a",)), "a"),
    (rq.list_tubes_watched(), b"list-tubes-watched\r\n", Response("OK", ("0",), b"---\n- a\n"), ["a"]),
    (rq.pause_tube("t", 0), b"pause-tube t 0\r\n", Response("PAUSED"), None),
]


@pytest.mark.parametrize(("req", "wire", "reply", "result"), CASES, ids=lambda v: None)
def test_request_bytes_and_result(req: rq.Request[Any], wire: bytes, reply: Response,
                                  result: object) -> None:
    assert req.data == wire
    assert rq.interpret(req, reply) == result
    assert rq.failure(req, reply) is None


@pytest.mark.parametrize("word", sorted(errors.ERRORS))
def test_every_error_word_raises_its_own_class(word: str) -> None:
    cls = errors.ERRORS[word]
    assert cls.word == word and issubclass(cls, errors.BeanstalkError)
    with pytest.raises(cls, match=word):
        rq.interpret(rq.peek(3), Response(word))


def test_error_table_covers_the_protocol_and_classes_are_distinct() -> None:
    words = {"NOT_FOUND", "TIMED_OUT", "DEADLINE_SOON", "BURIED", "DRAINING", "JOB_TOO_BIG",
             "EXPECTED_CRLF", "BAD_FORMAT", "UNKNOWN_COMMAND", "OUT_OF_MEMORY",
             "INTERNAL_ERROR", "NOT_IGNORED",
             "PERMISSION_DENIED", "NOT_PRIMARY", "RESULT_LIMIT"}  # stalkd's ACL, standbys, results
    assert set(errors.ERRORS) == words
    assert len(set(errors.ERRORS.values())) == len(words)
    assert not issubclass(errors.ClientConnectionError, errors.BeanstalkError)
    assert issubclass(errors.ReplyTimeout, TimeoutError)


def test_buried_carries_the_job_id() -> None:
    with pytest.raises(errors.Buried) as put_info:
        rq.interpret(rq.put(b"x", 0, 0, 1), Response("BURIED", ("12",)))
    assert put_info.value.id == 12
    with pytest.raises(errors.Buried) as rel_info:  # release's BURIED has no id: use the job's
        rq.interpret(rq.release(5, 0, 0), Response("BURIED"))
    assert rel_info.value.id == 5


@pytest.mark.parametrize("word", sorted(errors.ERRORS))
def test_errors_survive_pickling(word: str) -> None:
    import pickle

    err = errors.error_for(word, ("7",), "put 0 0 1 3", job_id=None)
    assert err is not None
    err.batch_index = 2
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err)
    assert back.context == err.context and back.batch_index == 2
    if isinstance(err, errors.Buried):
        assert isinstance(back, errors.Buried) and back.id == 7


def test_not_found_explains_itself_per_command() -> None:
    with pytest.raises(errors.NotFound, match=r"release 5 0 0: no such job, or it is not reserved"):
        rq.interpret(rq.release(5, 0, 0), Response("NOT_FOUND"))
    with pytest.raises(errors.NotFound, match=r"stats-tube t: no such tube"):
        rq.interpret(rq.stats_tube("t"), Response("NOT_FOUND"))


def test_unexpected_reply_is_a_protocol_error() -> None:
    with pytest.raises(errors.ProtocolError, match="'HELLO'.*delete 3"):
        rq.interpret(rq.delete(3), Response("HELLO"))
    with pytest.raises(errors.ProtocolError):
        rq.interpret(rq.stats(), Response("OK", ("3",), b"no yaml"))


@pytest.mark.parametrize(("build", "exc", "match"), [
    (lambda: rq.use(""), ValueError, "is empty"),
    (lambda: rq.use("-a"), ValueError, "starts with '-'"),
    (lambda: rq.watch("a b"), ValueError, "characters outside"),
    (lambda: rq.ignore("x" * 201), ValueError, "longer than 200"),
    (lambda: rq.use(b"bytes"), TypeError, "must be a str"),
    (lambda: rq.put(b"", -1, 0, 0), ValueError, "priority -1"),
    (lambda: rq.put(b"", 0, 2**32, 0), ValueError, "delay"),
    (lambda: rq.put(b"", 0, 0, float("nan")), ValueError, "ttr"),
    (lambda: rq.put(b"", True, 0, 0), TypeError, "priority must be an int"),
    (lambda: rq.delete(-1), ValueError, "job id -1"),
    (lambda: rq.delete(2**64), ValueError, "outside"),
    (lambda: rq.delete("3"), TypeError, "job id"),
    (lambda: rq.reserve(2**31), ValueError, "timeout=None"),
    (lambda: rq.body_bytes(3), TypeError, "bytes or str"),
])
def test_bad_arguments_are_refused_with_a_reason(build: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        build()


def test_longest_legal_tube_name() -> None:
    name = "a" * 200
    assert rq.pause_tube(name, 4294967295).data == f"pause-tube {name} 4294967295\r\n".encode()


@pytest.mark.parametrize(("text", "kw", "expected"), [
    (None, {}, Address("127.0.0.1", 11300)),
    ("h", {}, Address("h", 11300)),
    ("h:1", {}, Address("h", 1)),
    (":2", {}, Address("127.0.0.1", 2)),
    ("[::1]:3", {}, Address("::1", 3)),
    ("::1", {}, Address("::1", 11300)),
    ("h:1", {"port": 5}, Address("h", 5)),
    (None, {"host": "x", "port": 6}, Address("x", 6)),
    ("unix:/tmp/s", {}, Address(path="/tmp/s")),
])
def test_addresses(text: str | None, kw: dict[str, Any], expected: Address) -> None:
    assert parse_address(text, **kw) == expected


@pytest.mark.parametrize("text", ["h:x", "h:0", "h:70000", "[::1", "unix:"])
def test_bad_addresses(text: str) -> None:
    with pytest.raises(ValueError, match="port|address"):
        parse_address(text)
