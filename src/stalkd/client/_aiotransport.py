"""The asyncio client's transport: one connection (an ``asyncio.Protocol``, ``_aiowire``), its
connection and reconnection, and each exchange of requests and replies on it, with or without
failover. :class:`~stalkd.client.AsyncClient` is this class plus one method per beanstalkd
command (``aio``).

Built on an ``asyncio.Protocol`` rather than streams: each call writes its command and waits on
a future that ``data_received`` resolves, replies being matched to futures in send order. So
calls from several tasks pipeline on one connection with no lock (``gather`` of 100 puts is
one round trip's worth of waiting, not 100), and a call costs no task switch per read.

Ensures: a reply is matched to its command or the connection is dropped. A call that times
out or is cancelled drops the connection (a cancelled ``reserve`` could otherwise leave a job
reserved that nobody knows about; dropping makes the server release it), and calls in flight
beside it fail with ``ConnectionClosed``. The next call reconnects and restores ``use``/``watch``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from stalkd.client import _failover as failover
from stalkd.client import _requests as rq
from stalkd.client._address import Address
from stalkd.client._aiodial import find_primary, open_wire
from stalkd.client._aiowire import Wire
from stalkd.client._endpoint import Endpoint
from stalkd.client._idle import IdleCheck
from stalkd.client._wire import Response
from stalkd.client.errors import ClientConnectionError, ConnectionClosed, ProtocolError

__all__ = ["AsyncTransport"]

T = TypeVar("T")


class AsyncTransport(Endpoint):
    """The connection under an :class:`~stalkd.client.AsyncClient` (its docstring: the
    arguments)."""

    def __init__(self, address: str | Address | Sequence[str | Address] | None = None, *,
                 host: str | None = None, port: int | None = None,
                 timeout: float | None = 10.0, reconnect: bool = True,
                 failover_timeout: float | None = None) -> None:
        super().__init__(address, host=host, port=port, timeout=timeout, reconnect=reconnect,
                         failover_timeout=failover_timeout)
        self._gone: tuple[Wire, IdleCheck] | None = None  # with failover: the idle check
        self._wire: Wire | None = None
        self._connecting: asyncio.Lock | None = None

    # --- connection ---------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the connection (if not open) and restore the used tube and watch list."""
        await self._ensure()

    async def _ensure(self) -> Wire:
        wire = self._wire
        if wire is not None and wire.lost is None:
            return wire
        if self._connecting is None:  # created lazily: it binds to the running loop
            self._connecting = asyncio.Lock()
        async with self._connecting:
            wire = self._wire
            if wire is not None and wire.lost is None:
                return wire
            self._may_connect()
            wire = await self._open()
            self._wire = wire
            return wire

    async def _open(self) -> Wire:
        if self._failover.probing:
            wire, self.address = await find_primary(self._failover, self.timeout)
        else:
            wire = await open_wire(self.address, self.timeout)
        self._opened()
        requests = self._session.restore()
        if requests:
            for req, resp in zip(requests, await self._exchange_on(wire, requests, 0), strict=True):
                rq.interpret(req, resp)
        return wire

    async def reconnect(self) -> None:
        """Drop the connection (if any) and open a new one with the same tubes."""
        self._drop()
        await self._ensure()

    async def close(self) -> None:
        """Close the connection. The server releases jobs this connection had reserved."""
        self._closed_by_user = True
        wire, self._wire = self._wire, None
        if wire is not None and wire.transport is not None:
            wire.transport.close()
            try:
                await asyncio.wait_for(asyncio.shield(wire.closed), 5)
            except TimeoutError:
                wire.transport.abort()

    async def quit(self) -> None:
        """Send ``quit`` and close."""
        if self._wire is not None and self._wire.transport is not None and self._wire.lost is None:
            self._wire.transport.write(rq.QUIT)
        await self.close()

    @property
    def connected(self) -> bool:
        return self._wire is not None and self._wire.lost is None

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed"
        return f"<{type(self).__name__} {self.address} {state} using={self._session.using!r}>"

    def _drop(self) -> None:
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.fail(ConnectionClosed(f"connection to {self.address} was dropped by the client"))

    async def _exchange(self, requests: Sequence[rq.Request[Any]], extra: float | None,
                        after: tuple[int, Callable[[Response], None]] | None = None) -> list[Response]:
        return await self._exchange_on(await self._ensure(), requests, extra, after)

    async def _exchange_on(self, wire: Wire, requests: Sequence[rq.Request[Any]],
                           extra: float | None,
                           after: tuple[int, Callable[[Response], None]] | None = None) -> list[Response]:
        """Write all requests at once and await one reply each; on any failure drop ``wire``.
        ``after`` (index, callback) is called once the reply of ``requests[index]`` is in."""
        if wire.lost is not None:
            raise wire.lost
        assert wire.transport is not None
        limit = None if self.timeout is None or extra is None else self.timeout + extra
        new_future = wire.loop.create_future
        futs = []
        for req in requests:
            fut: asyncio.Future[Response] = new_future()
            wire.expect(fut, limit, req)
            futs.append(fut)
        wire.transport.write(requests[0].data if len(requests) == 1
                             else b"".join(r.data for r in requests))
        try:
            if after is None:
                return [await f for f in futs]
            out = []
            for f in futs:
                out.append(await f)
                if len(out) == after[0] + 1:
                    after[1](out[-1])
            return out
        except BaseException:
            for f in futs:
                f.cancel()  # nobody will await these now
            self._abandon(wire)
            raise

    def _abandon(self, wire: Wire) -> None:
        """A call on ``wire`` was cancelled or failed: its reply can no longer be placed."""
        wire.fail(ConnectionClosed(f"connection to {self.address} dropped: a call on it was "
                                   f"cancelled or failed"))
        if self._wire is wire:
            self._wire = None

    async def _call(self, request: rq.Request[T], extra: float | None = 0) -> T:
        wire = self._wire
        if self._failover.enabled:
            resp = await self._drive(failover.call(self._failover, request, extra,
                                                   clock=time.monotonic,
                                                   closed_by_user=self._user_closed))
        elif wire is None or wire.lost is not None or wire.transport is None:
            (resp,) = await self._exchange((request,), extra)
        else:  # the common case, without the list and loop of a batch (inline: no coroutine)
            limit = None if self.timeout is None or extra is None else self.timeout + extra
            fut: asyncio.Future[Response] = wire.loop.create_future()
            wire.expect(fut, limit, request)
            wire.transport.write(request.data)
            try:
                resp = await fut
            except BaseException:
                fut.cancel()
                self._abandon(wire)
                raise
        try:
            return rq.interpret(request, resp)
        except ProtocolError:
            self._drop()  # an answer we cannot place: the stream may be out of step
            raise

    def _idle_dead(self, wire: Wire) -> bool:
        """Whether the server closed ``wire`` while it was idle (see ``_idle``)."""
        if wire.waiters or wire.transport is None or self.address.tls is not None:
            return False
        gone = self._gone
        if gone is None or gone[0] is not wire:
            sock = wire.transport.get_extra_info("socket")
            if sock is None:
                return False
            gone = self._gone = (wire, IdleCheck(sock.fileno()))
        return gone[1]()

    async def _drive(self, plan: failover.Plan[T]) -> T:
        """Perform the steps of a failover plan (``_failover``: what is resent, and when)."""
        wire: Wire | None = None
        try:
            step = next(plan)
            while True:
                if step is failover.LEAVE:
                    assert wire is not None
                    if self._wire is wire:
                        self._wire = None  # no new call goes to a server that is not the primary
                    if not wire.waiters and wire.transport is not None:
                        wire.transport.close()
                    step = plan.send(None)
                    continue
                assert isinstance(step, failover.Send)
                wire = await self._ensure()
                if self._idle_dead(wire):
                    self._abandon(wire)  # died while idle: reconnect before sending, not after
                    continue
                try:
                    replies = await self._exchange_on(wire, step.requests, step.extra)
                except ClientConnectionError as e:
                    step = plan.throw(e)
                    continue
                if self._wire is not wire and not wire.waiters and wire.transport is not None:
                    wire.transport.close()  # its last call in flight is answered: let it go
                step = plan.send(replies)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except BaseException:
            plan.close()
            raise
