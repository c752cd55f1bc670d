"""Every beanstalkd command as a pure request value: wire bytes, expected reply, result decoder.

Both clients (sync and asyncio) send ``request.data`` and hand the reply to :func:`interpret`,
so argument checks, reply words and result types live here once. Nothing in this module
touches a socket.

Ensures: a request is built only from arguments the server would accept (tube grammar,
u32/u64 ranges), so a caller's mistake is a ``ValueError`` naming the argument, not a
``BAD_FORMAT`` from the server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from stalkd.client import _yaml
from stalkd.client._wire import Response
from stalkd.client.errors import BeanstalkError, ProtocolError, error_for
from stalkd.client.job import Job, JobLike, job_id

__all__ = ["Request", "interpret", "check_tube", "body_bytes", "DEFAULT_PRIORITY", "DEFAULT_TTR"]

T = TypeVar("T")

DEFAULT_PRIORITY = 2**31  # beanstalkd's own clients' customary middle priority
DEFAULT_TTR = 120
U32 = 2**32 - 1
# Tube names: 1..200 bytes of A-Z a-z 0-9 - + / ; . $ _ ( ), not starting with '-'.
_TUBE = re.compile(r"[A-Za-z0-9+/;.$_()][A-Za-z0-9\-+/;.$_()]{0,199}")


class Request(NamedTuple, Generic[T]):
    """One command: ``data`` to send, the success reply ``expect``ed, and ``decode`` for it.

    A NamedTuple rather than a frozen dataclass: one is built per command on the hot path.

    >>> r = delete(17)
    >>> r.data, r.expect, r.context
    (b'delete 17\\r\\n', 'DELETED', 'delete 17')
    """

    data: bytes
    expect: str
    decode: Callable[[Response], T]
    job: int | None = None
    not_found: str = ""  # what NOT_FOUND means for this command, for the error message
    # Sending it twice does no harm: it changes no job, or (a reserve) the server releases
    # what it reserved for a connection that drops. Only such a request is resent after its
    # connection was lost mid-flight (see _failover.resend_after_drop).
    safe: bool = False

    @property
    def context(self) -> str:
        """The command line sent (without a body), for error messages."""
        line = self.data[:self.data.find(b"\r\n")]
        return line.decode("ascii", errors="replace")


def interpret(request: Request[T], response: Response) -> T:
    """The result of ``request`` given the server's ``response``; error words raise.

    >>> interpret(kick(5), Response("KICKED", ("2",)))
    2
    """
    if response.word == request.expect:
        return request.decode(response)
    raise _failure(request, response)


def failure(request: Request[T], response: Response) -> BeanstalkError | None:
    """The exception ``response`` means for ``request``, or ``None`` if it is a success."""
    if response.word == request.expect:
        return None
    return _failure(request, response)


def _failure(request: Request[T], response: Response) -> BeanstalkError:
    context = request.context
    if response.word == "NOT_FOUND" and request.not_found:
        context = f"{context}: {request.not_found}"
    err = error_for(response.word, response.args, context, request.job)
    if err is None:
        raise ProtocolError(f"unexpected reply {response.word!r} {' '.join(response.args)!r} "
                            f"to {request.context!r}")
    return err


# --- argument checks ----------------------------------------------------------------------


def check_tube(name: str) -> str:
    """``name`` if it is a legal tube name, else ``ValueError`` saying why.

    >>> check_tube("emails.high")
    'emails.high'
    """
    if not isinstance(name, str):
        raise TypeError(f"tube name must be a str, not {type(name).__name__}")
    if not _TUBE.fullmatch(name):
        why = ("is empty" if not name else "is longer than 200 bytes" if len(name) > 200
               else "starts with '-'" if name.startswith("-")
               else "has characters outside A-Z a-z 0-9 - + / ; . $ _ ( )")
        raise ValueError(f"invalid tube name {name!r}: it {why}")
    return name


def _u32(what: str, value: int) -> int:
    if type(value) is int and 0 <= value <= U32:  # the common case, checked cheaply first
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value <= U32:
        raise ValueError(f"{what} {value} is outside 0..4294967295")
    return value


def _seconds(what: str, value: float) -> int:
    """Whole seconds for the wire; floats are rounded up so a delay is never shortened."""
    if type(value) is int and 0 <= value <= U32:
        return value
    if isinstance(value, float):
        if value != value or value < 0:
            raise ValueError(f"{what} {value} must be a non-negative number of seconds")
        whole = int(value)
        value = whole if whole == value else whole + 1
    return _u32(what, value)


def body_bytes(body: bytes | bytearray | memoryview | str) -> bytes:
    """Bytes to send for a body: bytes as given, ``str`` encoded as UTF-8."""
    if type(body) is bytes:
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"job body must be bytes or str, not {type(body).__name__}")


# --- decoders -----------------------------------------------------------------------------


def _none(_: Response) -> None:
    return None


def _int(r: Response) -> int:
    if not r.args or not r.args[0].isdigit():
        raise ProtocolError(f"{r.word} reply without a number: {r.args!r}")
    return int(r.args[0])


def _str(r: Response) -> str:
    if len(r.args) != 1:
        raise ProtocolError(f"{r.word} reply without exactly one name: {r.args!r}")
    return r.args[0]


def _job(r: Response) -> Job:
    assert r.body is not None  # the reader only yields RESERVED/FOUND with a body
    if not r.args[0].isdigit():
        raise ProtocolError(f"{r.word} reply with a bad job id: {r.args!r}")
    return Job(int(r.args[0]), r.body)


def _dict(str_keys: frozenset[str]) -> Callable[[Response], dict[str, _yaml.Value]]:
    def decode(r: Response) -> dict[str, _yaml.Value]:
        assert r.body is not None
        try:
            return _yaml.parse_dict(r.body, str_keys)
        except ValueError as e:
            raise ProtocolError(str(e)) from None
    return decode


def _list(r: Response) -> list[str]:
    assert r.body is not None
    try:
        return _yaml.parse_list(r.body)
    except ValueError as e:
        raise ProtocolError(str(e)) from None


# --- the commands (docs/protocol.md, "Commands"), in its order -------------------------------------


def put(body: bytes, priority: int, delay: float, ttr: float) -> Request[int]:
    """``put``; ``body`` already bytes (see :func:`body_bytes`)."""
    pri, dly, tr = _u32("priority", priority), _seconds("delay", delay), _seconds("ttr", ttr)
    head = b"put %d %d %d %d\r\n" % (pri, dly, tr, len(body))
    return Request(head + body + b"\r\n", "INSERTED", _int)


def use(tube: str) -> Request[str]:
    check_tube(tube)
    return Request(f"use {tube}\r\n".encode("ascii"), "USING", _str, safe=True)


def reserve(timeout: float | None) -> Request[Job]:
    if timeout is None:
        return Request(b"reserve\r\n", "RESERVED", _job, safe=True)
    secs = _seconds("reserve timeout", timeout)
    if secs > 2**31 - 1:  # beanstalkd 1.13 refuses larger ones with BAD_FORMAT
        raise ValueError(f"reserve timeout {secs} is above 2147483647 s; use timeout=None")
    return Request(b"reserve-with-timeout %d\r\n" % secs, "RESERVED", _job, safe=True)


def reserve_job(job: JobLike) -> Request[Job]:
    jid = job_id(job)
    return Request(b"reserve-job %d\r\n" % jid, "RESERVED", _job, jid,
                   "no such job, or it is already reserved", safe=True)


def delete(job: JobLike) -> Request[None]:
    jid = job_id(job)
    return Request(b"delete %d\r\n" % jid, "DELETED", _none, jid,
                   "no such job, or it is reserved by another connection")


def release(job: JobLike, priority: int, delay: float) -> Request[None]:
    jid, pri, dly = job_id(job), _u32("priority", priority), _seconds("delay", delay)
    return Request(b"release %d %d %d\r\n" % (jid, pri, dly), "RELEASED", _none, jid,
                   "no such job, or it is not reserved by this connection")


def bury(job: JobLike, priority: int) -> Request[None]:
    jid, pri = job_id(job), _u32("priority", priority)
    return Request(b"bury %d %d\r\n" % (jid, pri), "BURIED", _none, jid,
                   "no such job, or it is not reserved by this connection")


def touch(job: JobLike) -> Request[None]:
    jid = job_id(job)
    return Request(b"touch %d\r\n" % jid, "TOUCHED", _none, jid,
                   "no such job, or it is not reserved by this connection")


def watch(tube: str) -> Request[int]:
    check_tube(tube)
    return Request(f"watch {tube}\r\n".encode("ascii"), "WATCHING", _int, safe=True)


def ignore(tube: str) -> Request[int]:
    check_tube(tube)
    return Request(f"ignore {tube}\r\n".encode("ascii"), "WATCHING", _int, safe=True)


def peek(job: JobLike) -> Request[Job]:
    jid = job_id(job)
    return Request(b"peek %d\r\n" % jid, "FOUND", _job, jid, "no such job", safe=True)


def peek_ready() -> Request[Job]:
    return Request(b"peek-ready\r\n", "FOUND", _job,
                   not_found="no ready job in the used tube", safe=True)


def peek_delayed() -> Request[Job]:
    return Request(b"peek-delayed\r\n", "FOUND", _job,
                   not_found="no delayed job in the used tube", safe=True)


def peek_buried() -> Request[Job]:
    return Request(b"peek-buried\r\n", "FOUND", _job,
                   not_found="no buried job in the used tube", safe=True)


def kick(bound: int) -> Request[int]:
    n = _u32("kick bound", bound)
    return Request(b"kick %d\r\n" % n, "KICKED", _int)


def kick_job(job: JobLike) -> Request[None]:
    jid = job_id(job)
    return Request(b"kick-job %d\r\n" % jid, "KICKED", _none, jid,
                   "no such job, or it is neither buried nor delayed")


def stats_job(job: JobLike) -> Request[dict[str, _yaml.Value]]:
    jid = job_id(job)
    return Request(b"stats-job %d\r\n" % jid, "OK", _dict(_yaml.STATS_JOB_STR_KEYS), jid,
                   "no such job", safe=True)


def stats_tube(tube: str) -> Request[dict[str, _yaml.Value]]:
    check_tube(tube)
    return Request(f"stats-tube {tube}\r\n".encode("ascii"), "OK",
                   _dict(_yaml.STATS_TUBE_STR_KEYS),
                   not_found="no such tube", safe=True)


def stats() -> Request[dict[str, _yaml.Value]]:
    return Request(b"stats\r\n", "OK", _dict(_yaml.STATS_STR_KEYS), safe=True)


def list_tubes() -> Request[list[str]]:
    return Request(b"list-tubes\r\n", "OK", _list, safe=True)


def list_tube_used() -> Request[str]:
    return Request(b"list-tube-used\r\n", "USING", _str, safe=True)


def list_tubes_watched() -> Request[list[str]]:
    return Request(b"list-tubes-watched\r\n", "OK", _list, safe=True)


def pause_tube(tube: str, delay: float) -> Request[None]:
    check_tube(tube)
    secs = _seconds("pause delay", delay)
    return Request(f"pause-tube {tube} {secs}\r\n".encode("ascii"), "PAUSED", _none,
                   not_found="no such tube")


# --- stalkd's own commands (beanstalkd answers UNKNOWN_COMMAND) ------------------------------


def result_put(job: JobLike, ttl: float, body: bytes) -> Request[None]:
    """``result-put``: keep ``body`` as the job's result for ``ttl`` seconds (0 forgets it)."""
    jid, secs = job_id(job), _seconds("result ttl", ttl)
    return Request(b"result-put %d %d %d\r\n" % (jid, secs, len(body)) + body + b"\r\n", "STORED",
                   _none, jid, "this connection does not hold the job (nor, once it is gone, a job "
                   "of its tube)")


def result_get(job: JobLike) -> Request[Job]:
    """``result-get``: the job's stored result (as a ``Job`` of that id)."""
    jid = job_id(job)
    return Request(b"result-get %d\r\n" % jid, "FOUND", _job, jid, "no result stored, or it expired")


QUIT = b"quit\r\n"


def restore(using: str, watching: Sequence[str]) -> list[Request[Any]]:
    """Requests that give a fresh connection this used tube and watch list (reconnect).

    >>> [r.data for r in restore("u", ["w"])]
    [b'use u\\r\\n', b'watch w\\r\\n', b'ignore default\\r\\n']
    """
    requests: list[Request[Any]] = []
    if using != "default":
        requests.append(use(using))
    requests += [watch(t) for t in watching if t != "default"]
    if "default" not in watching:
        requests.append(ignore("default"))
    return requests
