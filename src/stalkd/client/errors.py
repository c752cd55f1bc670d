"""Client exceptions: one class per beanstalkd error word, in one table, plus connection errors.

Two families that callers treat differently:

* :class:`BeanstalkError` — the server answered, with an error word (``NOT_FOUND``,
  ``TIMED_OUT``, ...). The connection is still in step and usable.
* :class:`ClientConnectionError` — no usable answer (refused, closed, timed out waiting, a
  reply that is not beanstalkd). The client has closed its socket; the next call reconnects
  (when ``reconnect=True``) and restores ``use``/``watch``. Whether the failed command took
  effect is unknown, so it is never retried silently.

Example::

    try:
        client.delete(17)
    except errors.NotFound:
        pass                       # already gone
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BeanstalkError", "NotFound", "TimedOut", "DeadlineSoon", "Buried", "Draining", "JobTooBig",
    "ExpectedCrlf", "BadFormat", "UnknownCommand", "OutOfMemory", "InternalError", "NotIgnored",
    "PermissionDenied", "NotPrimary", "ResultLimit",
    "ClientConnectionError", "ConnectionFailed", "ConnectionClosed", "ReplyTimeout",
    "ProtocolError", "NoPrimary", "OutcomeUnknown", "ERRORS", "error_for",
]  # fmt: skip


class BeanstalkError(Exception):
    """The server replied with an error word. ``word`` is it, ``context`` the command sent.

    >>> str(TimedOut("reserve-with-timeout 5"))
    'TIMED_OUT (reserve-with-timeout 5): no job became ready before the reserve timeout'
    """

    word: str = ""
    hint: str = ""
    #: set by ``put_many`` on the failure it raises: the failing body's position, and the
    #: ids of all bodies (``None`` where a put failed)
    batch_index: int | None = None
    batch_ids: tuple[int | None, ...] | None = None

    def __init__(self, context: str = "") -> None:
        self.context = context
        where = f" ({context})" if context else ""
        hint = f": {self.hint}" if self.hint else ""
        super().__init__(f"{self.word}{where}{hint}")

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from the context, not the message (workers send errors between processes)
        return (type(self), (self.context,), self.__dict__)


class NotFound(BeanstalkError):
    word = "NOT_FOUND"


class TimedOut(BeanstalkError):
    word = "TIMED_OUT"
    hint = "no job became ready before the reserve timeout"


class DeadlineSoon(BeanstalkError):
    word = "DEADLINE_SOON"
    hint = "a job reserved by this connection reaches its TTR within a second; touch, delete or release it"


class Buried(BeanstalkError):
    """The job was buried instead (server out of memory). ``id`` is the job's id when known."""

    word = "BURIED"
    hint = "the server was out of memory and buried the job"

    def __init__(self, context: str = "", id: int | None = None) -> None:
        self.id = id
        super().__init__(context)

    def __str__(self) -> str:
        return super().__str__() if self.id is None else f"{super().__str__()} (job {self.id})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.context, self.id), self.__dict__)


class Draining(BeanstalkError):
    word = "DRAINING"
    hint = "the server is in drain mode and accepts no new jobs"


class JobTooBig(BeanstalkError):
    word = "JOB_TOO_BIG"
    hint = "the body is larger than the server's max-job-size (see `stats`)"


class ExpectedCrlf(BeanstalkError):
    word = "EXPECTED_CRLF"
    hint = "the body was not followed by CRLF (a client bug)"


class BadFormat(BeanstalkError):
    word = "BAD_FORMAT"
    hint = "the server could not parse the command line"


class UnknownCommand(BeanstalkError):
    word = "UNKNOWN_COMMAND"
    hint = "the server does not know this command"


class OutOfMemory(BeanstalkError):
    word = "OUT_OF_MEMORY"
    hint = "the server is out of memory or its log is out of disk space"


class InternalError(BeanstalkError):
    word = "INTERNAL_ERROR"
    hint = "the server hit an internal error; check its log"


class NotIgnored(BeanstalkError):
    word = "NOT_IGNORED"
    hint = "a connection must watch at least one tube"


class PermissionDenied(BeanstalkError):
    word = "PERMISSION_DENIED"
    hint = ("stalkd's ACL does not let this client certificate do that (only on TLS listeners "
            "with --acl; the roles and their grants: docs/access-control.md)")


class ResultLimit(BeanstalkError):
    word = "RESULT_LIMIT"
    hint = ("this client identity keeps as many results, or result bytes, as the server allows, "
            "or the TTL is longer than it allows (stalkd serve --max-results, --max-result-bytes, "
            "--max-result-ttl; `stats` shows them); let results expire or store less")


class NotPrimary(BeanstalkError):
    """The server is a standby (or a primary fenced by a newer one): it changes nothing.

    A client given several addresses finds the primary and resends the command there (the
    command was not applied, so resending is safe); with one address it raises this."""

    word = "NOT_PRIMARY"
    hint = ("this server is a standby, not the primary; give the client every server's "
            "address (-a PRIMARY,STANDBY) so it can find the primary")


#: Every error word the server can send, mapped to its exception class.
ERRORS: dict[str, type[BeanstalkError]] = {
    cls.word: cls
    for cls in (NotFound, TimedOut, DeadlineSoon, Buried, Draining, JobTooBig, ExpectedCrlf,
                BadFormat, UnknownCommand, OutOfMemory, InternalError, NotIgnored, PermissionDenied,
                NotPrimary, ResultLimit)
}


def error_for(word: str, args: tuple[str, ...], context: str, job_id: int | None = None) -> BeanstalkError | None:
    """The exception for error reply ``word`` (``None`` if it is not an error word).

    >>> error_for("BURIED", ("5",), "put").id
    5
    """
    cls = ERRORS.get(word)
    if cls is None:
        return None
    if cls is Buried:
        bid = int(args[0]) if args and args[0].isdigit() else job_id
        return Buried(context, id=bid)
    return cls(context)


class ClientConnectionError(ConnectionError):
    """No usable reply from the server; the client closed its socket. Base of the family."""


class ConnectionFailed(ClientConnectionError):
    """Could not connect to the server at all (names the address)."""


class ConnectionClosed(ClientConnectionError):
    """The server closed the connection (or it broke) before the reply was complete."""


class ReplyTimeout(ClientConnectionError, TimeoutError):
    """No complete reply within the client's ``timeout``; the connection is dropped because it
    can no longer be matched to its replies."""


class ProtocolError(ClientConnectionError):
    """The peer sent something that is not a beanstalkd reply (names the bytes received)."""


class NoPrimary(ConnectionFailed):
    """None of the client's addresses reported itself primary before ``failover_timeout`` ran
    out (each reachable one was a standby, the rest unreachable); the message says what each
    address answered."""


class OutcomeUnknown(ConnectionClosed):
    """The connection was lost after a command that changes state was sent and before its
    reply came, so whether the server applied it is unknown. The client does not resend it
    (a second ``put`` could make a duplicate job); it reconnects on the next call. Decide with
    the application's knowledge, e.g. look the job up, or put again if a duplicate is
    harmless."""
