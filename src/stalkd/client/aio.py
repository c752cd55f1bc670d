"""The asyncio client: :class:`~stalkd.client.Client`'s methods, awaited.

Ensures: as for the sync client, a reply is matched to its command or the connection is
dropped. Calls from several tasks are serialised by a lock (replies come back in order on one
connection), so a task waiting in ``reserve`` holds the connection until it returns; a task
cancelled mid-call drops the connection rather than leave a reply unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from stalkd.client import _requests as rq
from stalkd.client._address import Address, parse_address
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


class AsyncClient:
    """An asyncio beanstalkd client. Connects on ``connect()``, ``async with``, or first call.

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
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._reader = ReplyReader()
        self._lock: asyncio.Lock | None = None
        self._using = "default"
        self._watching: list[str] = ["default"]
        self._ever_connected = False

    # --- connection ---------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the connection (if not open) and restore the used tube and watch list."""
        async with self._locked():
            await self._connect()

    async def _connect(self) -> None:
        if self._streams is not None:
            return
        try:
            async with asyncio.timeout(self.timeout):
                if self.address.path is not None:
                    streams = await asyncio.open_unix_connection(self.address.path)
                else:
                    streams = await asyncio.open_connection(self.address.host, self.address.port)
        except (OSError, TimeoutError) as e:
            raise ConnectionFailed(f"cannot connect to beanstalkd server at {self.address}: "
                                   f"{e or 'timed out'}") from e
        sock = streams[1].get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._streams = streams
        self._reader = ReplyReader()
        self._ever_connected = True
        requests: list[rq.Request[Any]] = []
        if self._using != "default":
            requests.append(rq.use(self._using))
        requests += [rq.watch(t) for t in self._watching if t != "default"]
        if "default" not in self._watching:
            requests.append(rq.ignore("default"))
        if requests:
            for req, resp in zip(requests, await self._exchange(requests, 0), strict=True):
                rq.interpret(req, resp)

    async def reconnect(self) -> None:
        """Drop the connection (if any) and open a new one with the same tubes."""
        async with self._locked():
            self._drop()
            await self._connect()

    async def close(self) -> None:
        """Close the connection. The server releases jobs this connection had reserved."""
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()
            with contextlib.suppress(OSError):
                await streams[1].wait_closed()

    async def quit(self) -> None:
        """Send ``quit`` and close."""
        if self._streams is not None:
            with contextlib.suppress(OSError):
                self._streams[1].write(rq.QUIT)
        await self.close()

    @property
    def connected(self) -> bool:
        return self._streams is not None

    async def __aenter__(self) -> AsyncClient:
        await self.connect()
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "connected" if self._streams is not None else "closed"
        return f"<AsyncClient {self.address} {state} using={self._using!r}>"

    def _locked(self) -> asyncio.Lock:
        if self._lock is None:  # created lazily: it binds to the running loop
            self._lock = asyncio.Lock()
        return self._lock

    def _drop(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()

    async def _exchange(self, requests: Sequence[rq.Request[Any]], extra: float | None) -> list[Response]:
        """Send all requests in one write and read one reply per request (lock held)."""
        if self._streams is None:
            if self._ever_connected and not self.reconnect_enabled:
                raise ConnectionClosed(f"connection to {self.address} was closed (reconnect=False)")
            await self._connect()
        assert self._streams is not None
        reader, writer = self._streams
        limit = None if self.timeout is None or extra is None else self.timeout + extra
        ok = False
        try:
            async with asyncio.timeout(limit):
                writer.write(requests[0].data if len(requests) == 1
                             else b"".join(r.data for r in requests))
                await writer.drain()
                out = [await self._read(reader) for _ in requests]
            ok = True
            return out
        except TimeoutError:
            raise ReplyTimeout(f"no reply from {self.address} within {limit}s "
                               f"to {requests[0].context!r}; connection dropped") from None
        except ClientConnectionError:
            raise
        except OSError as e:
            raise ConnectionClosed(f"connection to {self.address} broke during "
                                   f"{requests[0].context!r}: {e}") from e
        finally:
            if not ok:  # out of step with the server, or cancelled: never reuse it
                self._drop()

    async def _read(self, reader: asyncio.StreamReader) -> Response:
        while True:
            resp = self._reader.next()
            if resp is not None:
                return resp
            data = await reader.read(65536)
            if not data:
                raise ConnectionClosed(f"server at {self.address} closed the connection")
            self._reader.feed(data)

    async def _call(self, request: rq.Request[T], extra: float | None = 0) -> T:
        async with self._locked():
            (resp,) = await self._exchange([request], extra)
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
        async with self._locked():
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
        return await self._call(rq.reserve(timeout), timeout)

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
