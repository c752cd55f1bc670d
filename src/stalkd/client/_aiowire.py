"""The asyncio transport's connection: an ``asyncio.Protocol`` that hands each reply to the
future waiting for it, in send order (see ``aio.AsyncClient``)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, cast

from stalkd.client import _requests as rq
from stalkd.client._address import Address
from stalkd.client._tls import why_refused
from stalkd.client._wire import ReplyReader, Response
from stalkd.client.errors import (
    ClientConnectionError,
    ConnectionClosed,
    ProtocolError,
    ReplyTimeout,
)

__all__ = ["Wire"]


class Wire(asyncio.Protocol):
    """One connection: bytes in, replies out to the futures waiting for them, in order.

    Ensures: the reply at the head of the queue is awaited at most its ``limit`` seconds from
    the moment it became due (the previous reply arrived, or it was sent onto an idle
    connection); then every waiter fails with ``ReplyTimeout``. One lazily re-armed timer per
    connection does this, not one timer per call.
    """

    def __init__(self, address: Address) -> None:
        self.address = address
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.reader = ReplyReader()
        # (future, its wait limit in seconds or None, the request for error messages)
        self.waiters: deque[tuple[asyncio.Future[Response], float | None, rq.Request[Any]]] = deque()
        self.head_deadline: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.lost: ClientConnectionError | None = None
        self.closed: asyncio.Future[None] = self.loop.create_future()
        self.replied = False  # nothing read yet: a TLS close now is a refused certificate

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a cast, not an isinstance check: uvloop's transports are not asyncio.Transport subclasses
        self.transport = cast(asyncio.Transport, transport)

    def expect(self, fut: asyncio.Future[Response], limit: float | None, req: rq.Request[Any]) -> None:
        """Queue ``fut`` for the next reply not yet claimed."""
        if not self.waiters:
            self._due(limit)
        self.waiters.append((fut, limit, req))

    def _due(self, limit: float | None) -> None:
        self.head_deadline = deadline = None if limit is None else self.loop.time() + limit
        if deadline is None:
            return
        # A timer left from an earlier head is kept if it fires before this deadline (``_check``
        # then re-arms it: no timer churn per call), and moved forward if it would fire after
        # it: a later call with a shorter limit would otherwise time out late.
        if self.timer is not None and self.timer.when() > deadline:
            self.timer.cancel()
            self.timer = None
        if self.timer is None:
            self.timer = self.loop.call_at(deadline, self._check)

    def _check(self) -> None:
        self.timer = None
        if not self.waiters or self.head_deadline is None:
            return
        if self.loop.time() >= self.head_deadline:
            _, limit, req = self.waiters[0]
            self.fail(ReplyTimeout(f"no reply from {self.address} within {limit}s to "
                                   f"{req.context!r}; connection dropped"))
        else:
            self.timer = self.loop.call_at(self.head_deadline, self._check)

    def data_received(self, data: bytes) -> None:
        reader, waiters = self.reader, self.waiters
        reader.feed(data)
        try:
            while waiters:
                resp = reader.next()
                if resp is None:
                    return
                fut = waiters.popleft()[0]
                self.replied = True
                if not fut.done():  # a cancelled caller's reply is dropped with it
                    fut.set_result(resp)
                if waiters:
                    self._due(waiters[0][1])
            if reader.buffered:
                raise ProtocolError(f"unsolicited bytes from {self.address}: "
                                    f"{bytes(data[-60:])!r}")
        except ProtocolError as e:
            self.fail(e)

    def connection_lost(self, exc: Exception | None) -> None:
        why = (f": {why_refused(self.address, exc)}" if self.address.tls is not None and not self.replied
               else "")
        self.fail(ConnectionClosed(f"server at {self.address} closed the connection"
                                   + (f": {exc}" if exc else "") + why))
        if not self.closed.done():
            self.closed.set_result(None)

    def fail(self, exc: ClientConnectionError) -> None:
        """Fail every waiting call with ``exc`` and abort the connection (idempotent)."""
        if self.lost is None:
            self.lost = exc
        while self.waiters:
            fut = self.waiters.popleft()[0]
            if not fut.done():
                fut.set_exception(exc)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.abort()
