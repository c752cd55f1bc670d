"""What both clients share, without a socket: the connection's session state and pipelined puts.

``Client`` (blocking sockets) and ``AsyncClient`` (asyncio) are transports: each opens the
connection in one place, writes a list of requests in one go and reads one reply per request.
Everything they decide about those requests lives here, once.

Ensures: ``Session`` records only what the server acknowledged (the tube in use, the watch
list), so ``use`` of the tube already in use costs no round trip and a reconnect restores
exactly what the old connection had; ``PutMany`` sends every body exactly once, reads every
reply, and reports the first failure with the ids of the others; with failover on, the puts
a batch got ``NOT_PRIMARY`` for (and only those: the server applied none of them) are handed
back to be sent again to the new primary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from stalkd.client import _requests as rq
from stalkd.client._wire import Response
from stalkd.client.errors import (
    BeanstalkError,
    DeadlineSoon,
    NotFound,
    NotPrimary,
    ProtocolError,
    TimedOut,
)
from stalkd.client.job import Job, JobLike

__all__ = ["Session", "PutMany", "PutSpec", "Body", "BATCH_JOBS", "BATCH_BYTES", "Finish",
           "Finished", "FINISH_HOW"]

Body = bytes | bytearray | memoryview | str


class PutSpec(NamedTuple):
    """A job in a ``put_many`` whose priority, delay or TTR differ from the call's (``None``:
    the call's).

    >>> PutSpec(b"urgent", priority=0)
    PutSpec(body=b'urgent', priority=0, delay=None, ttr=None)
    """

    body: Body
    priority: int | None = None
    delay: float | None = None
    ttr: float | None = None

# put_many sends at most this many commands (or bytes) before reading their replies, so
# neither side's socket buffers can fill up with the other blocked.
BATCH_JOBS = 1024
BATCH_BYTES = 1 << 20


class Session:
    """The tube in use and the watch list, as last acknowledged by the server.

    >>> s = Session()
    >>> s.use_request("default") is None      # already in use: nothing to send
    True
    >>> s.use_request("emails").data
    b'use emails\\r\\n'
    >>> s.used("emails"); s.use_request("emails") is None
    True
    """

    __slots__ = ("using", "watching")

    def __init__(self) -> None:
        self.using = "default"
        self.watching: list[str] = ["default"]

    def restore(self) -> list[rq.Request[Any]]:
        """What a new connection must send to be in the same state as the old one."""
        return rq.restore(self.using, self.watching)

    def use_request(self, tube: str) -> rq.Request[str] | None:
        """The ``use`` to send before putting into ``tube``, or ``None`` if it is in use."""
        return None if tube == self.using else rq.use(tube)

    def used(self, tube: str) -> None:
        self.using = tube

    def watched(self, tube: str) -> None:
        if tube not in self.watching:
            self.watching.append(tube)

    def ignored(self, tube: str) -> None:
        if tube in self.watching:
            self.watching.remove(tube)


class PutMany:
    """One ``put_many`` call: the batches to write, and the bookkeeping of their replies.

    A transport writes each batch from :meth:`batches` in one go and hands the replies to
    :meth:`take`; while ``take`` returns requests (those answered ``NOT_PRIMARY``, when
    ``resend_not_primary``), it finds the new primary and sends them as the batch instead.
    Then it returns :meth:`result`. ``take`` raises ``ProtocolError`` for a reply it cannot
    place (the transport then drops the connection).

    >>> p = PutMany([b"a", PutSpec("b", ttr=5)], priority=1, delay=0, ttr=60)
    >>> [r.data for batch in p.batches() for r in batch]
    [b'put 1 0 60 1\\r\\na\\r\\n', b'put 1 0 5 1\\r\\nb\\r\\n']
    """

    __slots__ = ("_bodies", "_args", "ids", "first", "_resend", "_slots")

    def __init__(self, bodies: Iterable[Body | PutSpec], *, priority: int, delay: float,
                 ttr: float, resend_not_primary: bool = False) -> None:
        self._bodies = bodies
        self._args = (priority, delay, ttr)
        self.ids: list[int | None] = []
        self.first: BeanstalkError | None = None
        self._resend = resend_not_primary
        self._slots: list[int] = []  # the position in ids of each request of the batch out

    def batches(self) -> Iterator[list[rq.Request[int]]]:
        priority, delay, ttr = self._args
        batch: list[rq.Request[int]] = []
        size = 0
        for body in self._bodies:
            if isinstance(body, PutSpec):
                req = rq.put(rq.body_bytes(body.body),
                             priority if body.priority is None else body.priority,
                             delay if body.delay is None else body.delay,
                             ttr if body.ttr is None else body.ttr)
            else:
                req = rq.put(rq.body_bytes(body), priority, delay, ttr)
            batch.append(req)
            size += len(req.data)
            if len(batch) >= BATCH_JOBS or size >= BATCH_BYTES:
                yield self._out(batch)
                batch, size = [], 0
        if batch:
            yield self._out(batch)

    def _out(self, batch: list[rq.Request[int]]) -> list[rq.Request[int]]:
        self._slots = list(range(len(self.ids), len(self.ids) + len(batch)))
        self.ids += [None] * len(batch)
        return batch

    def take(self, batch: list[rq.Request[int]], replies: list[Response]) -> list[rq.Request[int]]:
        """Record the replies to ``batch``; returns the requests to send again (possibly none).

        >>> p = PutMany([b"a", b"b"], priority=0, delay=0, ttr=1, resend_not_primary=True)
        >>> (batch,) = p.batches()
        >>> again = p.take(batch, [Response("INSERTED", ("7",)), Response("NOT_PRIMARY")])
        >>> [r.data for r in again]
        [b'put 0 0 1 1\\r\\nb\\r\\n']
        >>> p.take(again, [Response("INSERTED", ("9",))]), p.result()
        ([], [7, 9])
        """
        ids = self.ids
        again: list[rq.Request[int]] = []
        slots: list[int] = []
        for req, resp, slot in zip(batch, replies, self._slots, strict=True):
            if resp.word == NotPrimary.word and self._resend:
                again.append(req)
                slots.append(slot)
                continue
            err = rq.failure(req, resp)
            if err is None:
                ids[slot] = int(resp.args[0])
                continue
            if self.first is None or slot < (self.first.batch_index or 0):
                err.batch_index = slot
                self.first = err
        self._slots = slots
        return again

    def result(self) -> list[int]:
        """The ids in order; raises the first failure (with ``batch_index``/``batch_ids``)."""
        if self.first is not None:
            self.first.batch_ids = tuple(self.ids)
            raise self.first
        return [i for i in self.ids if i is not None]


FINISH_HOW = ("delete", "release", "bury")


class Finished(NamedTuple):
    """What ``finish`` got: the result's failure (``None``: stored, or none was sent), whether
    the job was acted on (False: ``NOT_FOUND``, it was no longer reserved by this connection),
    and the job reserved next (``None``: none was asked for, none came, or ``DEADLINE_SOON``)."""

    result_error: BeanstalkError | None
    acked: bool
    reserved: Job | None


class Finish:
    """A reserved job's last commands, written at once: its result (``result-put``, stalkd's
    own command, optional), its acknowledgement (``delete``, ``release`` or ``bury``), and the
    next ``reserve-with-timeout`` (optional). beanstalkd answers commands in order and runs the
    reserve only after the acknowledgement, so without a result this is the plain protocol: one
    round trip instead of two. On stalkd the result and the acknowledgement also share one
    fsync. (beanstalkd reads a ``result-put``'s body as a command of its own: ``take`` raises
    ``ProtocolError`` then, and the transport drops the connection.)

    >>> f = Finish("delete", 7, result=(7, 60, b"1"), reserve=True, timeout=1)
    >>> [r.data for r in f.requests]
    [b'result-put 7 60 1\\r\\n1\\r\\n', b'delete 7\\r\\n', b'reserve-with-timeout 1\\r\\n']
    >>> f.ack_index
    1
    >>> f.take([Response("STORED"), Response("NOT_FOUND"), Response("TIMED_OUT")])
    Finished(result_error=None, acked=False, reserved=None)
    """

    __slots__ = ("requests", "ack_index", "_result", "_reserve")

    def __init__(self, how: str, job: JobLike, *, priority: int = rq.DEFAULT_PRIORITY,
                 delay: float = 0, result: tuple[JobLike, float, bytes] | None = None,
                 reserve: bool = False, timeout: float | None = None) -> None:
        if how == "delete":
            ack: rq.Request[None] = rq.delete(job)
        elif how == "release":
            ack = rq.release(job, priority, delay)
        elif how == "bury":
            ack = rq.bury(job, priority)
        else:
            raise ValueError(f"how must be one of {', '.join(FINISH_HOW)}, not {how!r}")
        requests: list[rq.Request[Any]] = []
        self._result = None if result is None else rq.result_put(*result)
        if self._result is not None:
            requests.append(self._result)
        self.ack_index = len(requests)
        requests.append(ack)
        self._reserve = rq.reserve(timeout) if reserve else None
        if self._reserve is not None:
            requests.append(self._reserve)
        self.requests = requests

    def acked(self, reply: Response) -> bool:
        """Whether the acknowledgement's ``reply`` says the job was acted on."""
        return reply.word == self.requests[self.ack_index].expect

    def take(self, replies: list[Response]) -> Finished:
        """The outcome of each command; errors other than the expected ones raise."""
        result_error = None
        if self._result is not None:
            if replies[0].word == "UNKNOWN_COMMAND":
                # beanstalkd: it took the result's body for a command too, one reply more
                raise ProtocolError("the server does not know result-put (beanstalkd?): its "
                                    "replies are out of step with the commands; keep results "
                                    "elsewhere there")
            result_error = rq.failure(self._result, replies[0])
        try:
            rq.interpret(self.requests[self.ack_index], replies[self.ack_index])
            acked = True
        except NotFound:
            acked = False
        reserved = None
        if self._reserve is not None:
            with contextlib.suppress(TimedOut, DeadlineSoon):
                reserved = rq.interpret(self._reserve, replies[-1])
        return Finished(result_error, acked, reserved)
