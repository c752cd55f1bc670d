"""The server operations the worker needs, over ``stalkd.client``, in one place.

Not-found answers become ``None``/``False`` values here (a job deleted under a heartbeat or a
dependency that completed is normal flow for the worker, not an error). The methods are the
names the delivery pipeline's ``Call`` steps use; ``testing.MemoryServer`` offers the same.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from stalkd.client import AsyncClient, Client, Finished, errors
from stalkd.client.job import Job
from stalkd.worker.results import NO_RESULT_SERVER, ResultBackend, ResultsUnsupported, ServerResults

__all__ = ["ServerOps", "AsyncServerOps", "Reserved", "Result", "result_not_stored"]

log = logging.getLogger("stalkd.worker")

Reserved = tuple[int, bytes]
Result = tuple[ResultBackend, int, bytes, float]  # backend, the job id it is kept by, data, ttl


def _on_server(result: Result | None) -> tuple[int, int, bytes] | None:
    """``result`` as ``Client.finish`` sends it when its backend is the server, else None."""
    if result is None or not isinstance(result[0], ServerResults):
        return None
    _, job_id, data, ttl = result
    return job_id, max(1, math.ceil(ttl)), data


def _finished(result: Result | None, error: Exception | None) -> None:
    """Log a result the server refused (the job is acknowledged all the same)."""
    if result is not None and error is not None:
        result_not_stored(result[1], error)


class _Acks:
    """``on_acked`` for ``Client.finish``: remembers the acknowledgement, since a connection
    lost after it only loses the reserve, and passes it on."""

    __slots__ = ("acked", "then")

    def __init__(self, then: Callable[[bool], None] | None) -> None:
        self.acked: list[bool] = []
        self.then = then

    def __call__(self, ok: bool) -> None:
        self.acked.append(ok)
        if self.then is not None:
            self.then(ok)

    def after_loss(self, exc: OSError) -> tuple[bool, None]:
        """The connection broke: raise unless the acknowledgement was already in."""
        if not self.acked:
            raise exc
        return self.acked[0], None


def _outcome(result: Result | None, done: Finished) -> tuple[bool, Reserved | None]:
    _finished(result, done.result_error)
    job = done.reserved
    return done.acked, None if job is None else (job.id, bytes(job.body))


def result_not_stored(job_id: int, exc: Exception) -> bool:
    """Log a result the backend refused (the job is acknowledged all the same: running it
    again would not make a backend that cannot store work); False, for the pipeline."""
    log.error("job %d: result not stored: %s", job_id, exc)
    return False


class ServerOps:
    """A blocking connection for one worker slot or producer thread (not shared by threads)."""

    def __init__(self, address: str, *, timeout: float = 10.0) -> None:
        self.address = address
        self.client = Client(address, timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def abort(self) -> None:
        """Close from another thread: shut the socket down first, so a ``recv`` blocked in the
        owning thread returns and the server sees the disconnect (and releases our jobs) now."""
        self.client.abort()

    def watch_only(self, tubes: list[str]) -> None:
        for t in tubes:
            self.client.watch(t)
        if "default" not in tubes:
            self.client.ignore("default")

    def reserve(self, timeout: float | None) -> Reserved | None:
        try:
            job = self.client.reserve(timeout=None if timeout is None else int(timeout))
        except (errors.TimedOut, errors.DeadlineSoon):
            return None
        return job.id, bytes(job.body)

    def put(self, tube: str, body: bytes, priority: int, delay: int, ttr: int) -> int:
        return self.client.put(body, tube=tube, priority=priority, delay=delay, ttr=ttr)

    def put_many(self, tube: str, bodies: list[bytes], priority: int, delay: int,
                 ttr: int) -> list[int]:
        return self.client.put_many(bodies, tube=tube, priority=priority, delay=delay, ttr=ttr)

    def delete(self, job_id: int) -> bool:
        try:
            self.client.delete(job_id)
            return True
        except errors.NotFound:
            return False

    def release(self, job_id: int, priority: int, delay: int) -> bool:
        try:
            self.client.release(job_id, priority=priority, delay=delay)
            return True
        except errors.NotFound:  # no longer reserved by us (its TTR ran out)
            return False

    def bury(self, job_id: int, priority: int) -> bool:
        try:
            self.client.bury(job_id, priority=priority)
            return True
        except errors.NotFound:
            return False

    def touch(self, job_id: int) -> None:
        self.client.touch(job_id)

    def finish(self, how: str, job_id: int, priority: int, delay: int, result: Result | None, *,
               reserve: bool = False, timeout: float | None = None,
               on_acked: Callable[[bool], None] | None = None) -> tuple[bool, Reserved | None]:
        """A delivery's last calls: keep ``result``, then delete/release/bury the job (``how``),
        then (``reserve``) reserve the next one: one round trip with the server's results,
        which share the acknowledgement's fsync (another backend stores first, on its own).
        Returns whether the job was acted on and the job reserved next. ``on_acked(acted_on)``
        runs once the acknowledgement is in; a connection lost after that only loses the reserve (the
        server releases what it reserved for a closed connection), so it is not raised."""
        on_server = _on_server(result)
        if result is not None and on_server is None:
            self.store_result(*result)
        ack = _Acks(on_acked)
        try:
            done = self.client.finish(job_id, how, priority=priority, delay=delay,
                                      result=on_server, reserve=reserve,
                                      timeout=None if timeout is None else int(timeout),
                                      on_acked=ack)
        except OSError as exc:
            return ack.after_loss(exc)
        return _outcome(result, done)

    def fetch_results(self, backend: ResultBackend, job_ids: tuple[int, ...]) -> list[bytes | None]:
        """The outcomes stored for ``job_ids`` (None for each missing one)."""
        if isinstance(backend, ServerResults):
            out: list[bytes | None] = []
            for jid in job_ids:
                try:
                    out.append(self.client.result_get(jid))
                except errors.NotFound:
                    out.append(None)
            return out
        return [backend.fetch(jid) for jid in job_ids]

    def store_result(self, backend: ResultBackend, job_id: int, data: bytes, ttl: float) -> bool:
        """Keep a job's outcome (on this connection when the backend is this server)."""
        try:
            backend.store(job_id, data, ttl, via=self.client)
            return True
        except OSError:
            raise  # the connection broke: the job runs again, as for any lost acknowledgement
        except Exception as exc:  # noqa: BLE001 - any backend's failure: logged, job acknowledged
            return result_not_stored(job_id, exc)

    def kick_job(self, job_id: int) -> bool:
        try:
            self.client.kick_job(job_id)
            return True
        except errors.NotFound:
            return False

    def stats_job(self, job_id: int) -> dict[str, Any] | None:
        try:
            return dict(self.client.stats_job(job_id))
        except errors.NotFound:
            return None

    def stats_tube(self, tube: str) -> dict[str, Any] | None:
        try:
            return dict(self.client.stats_tube(tube))
        except errors.NotFound:
            return None

    def list_tubes(self) -> list[str]:
        return list(self.client.list_tubes())

    def peek(self, job_id: int) -> Reserved | None:
        try:
            job = self.client.peek(job_id)
        except errors.NotFound:
            return None
        return job.id, bytes(job.body)

    def peek_ready(self, tube: str) -> Reserved | None:
        return self._peek(tube, self.client.peek_ready)

    def peek_delayed(self, tube: str) -> Reserved | None:
        return self._peek(tube, self.client.peek_delayed)

    def _peek(self, tube: str, peek: Callable[[], Job]) -> Reserved | None:
        self.client.use(tube)
        try:
            job = peek()
        except errors.NotFound:
            return None
        return job.id, bytes(job.body)


class AsyncServerOps:
    """The asyncio twin of :class:`ServerOps` (what the asyncio driver's steps call)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    @classmethod
    async def open(cls, address: str, *, timeout: float = 10.0) -> AsyncServerOps:
        client = AsyncClient(address, timeout=timeout)
        await client.connect()
        return cls(client)

    async def close(self) -> None:
        await self.client.close()

    async def watch_only(self, tubes: list[str]) -> None:
        for t in tubes:
            await self.client.watch(t)
        if "default" not in tubes:
            await self.client.ignore("default")

    async def reserve(self, timeout: float | None) -> Reserved | None:
        try:
            job = await self.client.reserve(timeout=None if timeout is None else int(timeout))
        except (errors.TimedOut, errors.DeadlineSoon):
            return None
        return job.id, bytes(job.body)

    async def put(self, tube: str, body: bytes, priority: int, delay: int, ttr: int) -> int:
        return await self.client.put(body, tube=tube, priority=priority, delay=delay, ttr=ttr)

    async def put_many(self, tube: str, bodies: list[bytes], priority: int, delay: int,
                       ttr: int) -> list[int]:
        return await self.client.put_many(bodies, tube=tube, priority=priority, delay=delay,
                                          ttr=ttr)

    async def delete(self, job_id: int) -> bool:
        try:
            await self.client.delete(job_id)
            return True
        except errors.NotFound:
            return False

    async def release(self, job_id: int, priority: int, delay: int) -> bool:
        try:
            await self.client.release(job_id, priority=priority, delay=delay)
            return True
        except errors.NotFound:
            return False

    async def bury(self, job_id: int, priority: int) -> bool:
        try:
            await self.client.bury(job_id, priority=priority)
            return True
        except errors.NotFound:
            return False

    async def touch(self, job_id: int) -> None:
        await self.client.touch(job_id)

    async def finish(self, how: str, job_id: int, priority: int, delay: int,
                     result: Result | None, *, reserve: bool = False,
                     timeout: float | None = None,
                     on_acked: Callable[[bool], None] | None = None) -> tuple[bool, Reserved | None]:
        """``ServerOps.finish``, awaited."""
        on_server = _on_server(result)
        if result is not None and on_server is None:
            await self.store_result(*result)
        ack = _Acks(on_acked)
        try:
            done = await self.client.finish(job_id, how, priority=priority, delay=delay,
                                            result=on_server, reserve=reserve,
                                            timeout=None if timeout is None else int(timeout),
                                            on_acked=ack)
        except OSError as exc:
            return ack.after_loss(exc)
        return _outcome(result, done)

    async def fetch_results(self, backend: ResultBackend, job_ids: tuple[int, ...]) -> list[bytes | None]:
        """``ServerOps.fetch_results``."""
        if isinstance(backend, ServerResults):
            out: list[bytes | None] = []
            for jid in job_ids:
                try:
                    out.append(await self.client.result_get(jid))
                except errors.NotFound:
                    out.append(None)
            return out
        return await asyncio.to_thread(lambda: [backend.fetch(jid) for jid in job_ids])

    async def store_result(self, backend: ResultBackend, job_id: int, data: bytes, ttl: float) -> bool:
        """``ServerOps.store_result``; another backend than the server runs on a thread."""
        try:
            if isinstance(backend, ServerResults):
                try:
                    await self.client.result_put(job_id, max(1, int(-(-ttl // 1))), data)
                except errors.UnknownCommand:
                    raise ResultsUnsupported(NO_RESULT_SERVER.format(
                        address=backend.address, command="result-put")) from None
            else:
                await asyncio.to_thread(backend.store, job_id, data, ttl)
            return True
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - as in ServerOps
            return result_not_stored(job_id, exc)

    async def kick_job(self, job_id: int) -> bool:
        try:
            await self.client.kick_job(job_id)
            return True
        except errors.NotFound:
            return False

    async def peek_ready(self, tube: str) -> Reserved | None:
        return await self._peek(tube, self.client.peek_ready)

    async def peek_delayed(self, tube: str) -> Reserved | None:
        return await self._peek(tube, self.client.peek_delayed)

    async def _peek(self, tube: str, peek: Callable[[], Awaitable[Job]]) -> Reserved | None:
        await self.client.use(tube)
        try:
            job = await peek()
        except errors.NotFound:
            return None
        return job.id, bytes(job.body)

    async def stats_job(self, job_id: int) -> dict[str, Any] | None:
        try:
            return dict(await self.client.stats_job(job_id))
        except errors.NotFound:
            return None

    async def stats_tube(self, tube: str) -> dict[str, Any] | None:
        try:
            return dict(await self.client.stats_tube(tube))
        except errors.NotFound:
            return None
