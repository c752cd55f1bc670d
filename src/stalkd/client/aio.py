"""The asyncio client: :class:`~stalkd.client.Client`'s methods, awaited.

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
import math
import socket
from collections import deque
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar, cast

from stalkd.client import _requests as rq
from stalkd.client._address import Address, parse_address
from stalkd.client._tls import connection_kwargs
from stalkd.client._wire import ReplyReader, Response
from stalkd.client._yaml import Value
from stalkd.client.errors import (
    BeanstalkError,
    ClientConnectionError,
    ConnectionClosed,
    ConnectionFailed,
    ProtocolError,
    ReplyTimeout,
)
from stalkd.client.job import Job, JobLike
from stalkd.client.sync import _BATCH_BYTES, _BATCH_JOBS, Body

__all__ = ["AsyncClient"]

T = TypeVar("T")


class _Wire(asyncio.Protocol):
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

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a cast, not an isinstance check: uvloop's transports are not asyncio.Transport subclasses
        self.transport = cast(asyncio.Transport, transport)

    def expect(self, fut: asyncio.Future[Response], limit: float | None, req: rq.Request[Any]) -> None:
        """Queue ``fut`` for the next reply not yet claimed."""
        if not self.waiters:
            self._due(limit)
        self.waiters.append((fut, limit, req))

    def _due(self, limit: float | None) -> None:
        self.head_deadline = None if limit is None else self.loop.time() + limit
        if self.timer is None and self.head_deadline is not None:
            self.timer = self.loop.call_at(self.head_deadline, self._check)

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
        self.fail(ConnectionClosed(f"server at {self.address} closed the connection"
                                   + (f": {exc}" if exc else "")))
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


class AsyncClient:
    """An asyncio beanstalkd client. Connects on ``connect()``, ``async with``, or first call.

    ``timeout`` bounds connecting and the wait for each reply once it is due, i.e. once the
    replies queued before it have arrived (``None``: forever); a ``reserve`` waits for its
    own timeout on top of it.

    Tasks may share one client: their calls pipeline. The used tube and the watch list are
    the connection's, so tasks that ``use`` different tubes should not share one.

    Example::

        async with AsyncClient("127.0.0.1:11300") as c:
            await c.use("emails")
            await c.put(b"hello")
            await c.watch("emails")
            job = await c.reserve(timeout=5)
            await c.delete(job)
    """

    def __init__(self, address: str | None = None, *, host: str | None = None,
                 port: int | None = None, timeout: float | None = 10.0,
                 reconnect: bool = True) -> None:
        self.address: Address = parse_address(address, host, port)
        self.timeout = timeout
        self.reconnect_enabled = reconnect
        self._wire: _Wire | None = None
        self._connecting: asyncio.Lock | None = None
        self._using = "default"
        self._watching: list[str] = ["default"]
        self._ever_connected = False

    # --- connection ---------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the connection (if not open) and restore the used tube and watch list."""
        await self._ensure()

    async def _ensure(self) -> _Wire:
        wire = self._wire
        if wire is not None and wire.lost is None:
            return wire
        if self._connecting is None:  # created lazily: it binds to the running loop
            self._connecting = asyncio.Lock()
        async with self._connecting:
            wire = self._wire
            if wire is not None and wire.lost is None:
                return wire
            if self._ever_connected and not self.reconnect_enabled:
                raise ConnectionClosed(f"connection to {self.address} was closed (reconnect=False)")
            wire = await self._open()
            self._wire = wire
            return wire

    async def _open(self) -> _Wire:
        loop = asyncio.get_running_loop()
        addr = self.address
        try:
            async with asyncio.timeout(self.timeout):
                if addr.path is not None:
                    _, wire = await loop.create_unix_connection(lambda: _Wire(addr), addr.path)
                else:
                    _, wire = await loop.create_connection(lambda: _Wire(addr), addr.host, addr.port,
                                                           **connection_kwargs(addr))
        except (OSError, TimeoutError) as e:
            raise ConnectionFailed(f"cannot connect to beanstalkd server at {addr}: "
                                   f"{e or 'timed out'}") from e
        assert wire.transport is not None
        sock = wire.transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ever_connected = True
        requests = rq.restore(self._using, self._watching)
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

    async def __aenter__(self) -> AsyncClient:
        await self.connect()
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed"
        return f"<AsyncClient {self.address} {state} using={self._using!r}>"

    def _drop(self) -> None:
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.fail(ConnectionClosed(f"connection to {self.address} was dropped by the client"))

    async def _exchange(self, requests: Sequence[rq.Request[Any]], extra: float | None) -> list[Response]:
        return await self._exchange_on(await self._ensure(), requests, extra)

    async def _exchange_on(self, wire: _Wire, requests: Sequence[rq.Request[Any]],
                           extra: float | None) -> list[Response]:
        """Write all requests at once and await one reply each; on any failure drop ``wire``."""
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
            return [await f for f in futs]
        except BaseException:
            for f in futs:
                f.cancel()  # nobody will await these now
            self._abandon(wire)
            raise

    def _abandon(self, wire: _Wire) -> None:
        """A call on ``wire`` was cancelled or failed: its reply can no longer be placed."""
        wire.fail(ConnectionClosed(f"connection to {self.address} dropped: a call on it was "
                                   f"cancelled or failed"))
        if self._wire is wire:
            self._wire = None

    async def _call(self, request: rq.Request[T], extra: float | None = 0) -> T:
        wire = self._wire
        if wire is None or wire.lost is not None or wire.transport is None:
            (resp,) = await self._exchange((request,), extra)
        else:  # the common case, without the list and loop of a batch
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

    # --- producer commands ----------------------------------------------------------------

    async def use(self, tube: str) -> str:
        """Put later jobs into ``tube``. Returns the tube name."""
        name = await self._call(rq.use(tube))
        self._using = name
        return name

    @property
    def using(self) -> str:
        return self._using

    async def put(self, body: Body, *, priority: int = rq.DEFAULT_PRIORITY, delay: float = 0,
                  ttr: float = rq.DEFAULT_TTR) -> int:
        """Put a job into the used tube; returns its id."""
        return await self._call(rq.put(rq.body_bytes(body), priority, delay, ttr))

    async def put_many(self, bodies: Iterable[Body], *, priority: int = rq.DEFAULT_PRIORITY,
                       delay: float = 0, ttr: float = rq.DEFAULT_TTR) -> list[int]:
        """Pipelined puts, as :meth:`stalkd.client.Client.put_many`."""
        ids: list[int | None] = []
        first: BeanstalkError | None = None
        batch: list[rq.Request[Any]] = []
        size = 0
        try:
            for body in bodies:
                req = rq.put(rq.body_bytes(body), priority, delay, ttr)
                batch.append(req)
                size += len(req.data)
                if len(batch) >= _BATCH_JOBS or size >= _BATCH_BYTES:
                    first = self._collect(batch, await self._exchange(batch, 0), ids, first)
                    batch, size = [], 0
            if batch:
                first = self._collect(batch, await self._exchange(batch, 0), ids, first)
        except ProtocolError:
            self._drop()  # an answer we cannot place: the stream may be out of step
            raise
        if first is not None:
            first.batch_ids = tuple(ids)
            raise first
        return [i for i in ids if i is not None]

    @staticmethod
    def _collect(batch: list[rq.Request[Any]], replies: list[Response], ids: list[int | None],
                 first: BeanstalkError | None) -> BeanstalkError | None:
        for req, resp in zip(batch, replies, strict=True):
            err = rq.failure(req, resp)
            if err is None:
                ids.append(int(resp.args[0]))
            else:
                if first is None:
                    err.batch_index = len(ids)
                    first = err
                ids.append(None)
        return first

    # --- worker commands ------------------------------------------------------------------

    async def watch(self, tube: str) -> int:
        n = await self._call(rq.watch(tube))
        if tube not in self._watching:
            self._watching.append(tube)
        return n

    async def ignore(self, tube: str) -> int:
        n = await self._call(rq.ignore(tube))
        if tube in self._watching:
            self._watching.remove(tube)
        return n

    @property
    def watching(self) -> tuple[str, ...]:
        return tuple(self._watching)

    async def reserve(self, timeout: float | None = None) -> Job:
        """Reserve a job, waiting up to ``timeout`` s (``None``: forever)."""
        return await self._call(rq.reserve(timeout), None if timeout is None else math.ceil(timeout))

    async def reserve_job(self, job: JobLike) -> Job:
        return await self._call(rq.reserve_job(job))

    async def delete(self, job: JobLike) -> None:
        await self._call(rq.delete(job))

    async def release(self, job: JobLike, *, priority: int = rq.DEFAULT_PRIORITY,
                      delay: float = 0) -> None:
        await self._call(rq.release(job, priority, delay))

    async def bury(self, job: JobLike, *, priority: int = rq.DEFAULT_PRIORITY) -> None:
        await self._call(rq.bury(job, priority))

    async def touch(self, job: JobLike) -> None:
        await self._call(rq.touch(job))

    # --- inspection and admin -------------------------------------------------------------

    async def peek(self, job: JobLike) -> Job:
        return await self._call(rq.peek(job))

    async def peek_ready(self) -> Job:
        return await self._call(rq.peek_ready())

    async def peek_delayed(self) -> Job:
        return await self._call(rq.peek_delayed())

    async def peek_buried(self) -> Job:
        return await self._call(rq.peek_buried())

    async def kick(self, bound: int) -> int:
        return await self._call(rq.kick(bound))

    async def kick_job(self, job: JobLike) -> None:
        await self._call(rq.kick_job(job))

    async def stats_job(self, job: JobLike) -> dict[str, Value]:
        return await self._call(rq.stats_job(job))

    async def stats_tube(self, tube: str) -> dict[str, Value]:
        return await self._call(rq.stats_tube(tube))

    async def stats(self) -> dict[str, Value]:
        return await self._call(rq.stats())

    async def list_tubes(self) -> list[str]:
        return await self._call(rq.list_tubes())

    async def list_tube_used(self) -> str:
        return await self._call(rq.list_tube_used())

    async def list_tubes_watched(self) -> list[str]:
        return await self._call(rq.list_tubes_watched())

    async def pause_tube(self, tube: str, delay: float) -> None:
        await self._call(rq.pause_tube(tube, delay))
