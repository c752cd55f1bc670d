"""The asyncio client: :class:`~stalkd.client.Client`'s methods, awaited. The connection itself
(one ``asyncio.Protocol``, calls from several tasks pipelined on it, each exchange and its
guarantees) is ``_aiotransport``.

Given several addresses, it connects to the primary and follows it across a failover, as
``Client`` does (the rule in ``_failover``); the addresses are probed at the same time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from stalkd.client import _failover as failover
from stalkd.client import _requests as rq
from stalkd.client._aiotransport import AsyncTransport
from stalkd.client._core import Body, Finish, Finished, PutMany, PutSpec
from stalkd.client._wire import Response
from stalkd.client._yaml import Value
from stalkd.client.errors import ProtocolError
from stalkd.client.job import Job, JobLike

__all__ = ["AsyncClient"]


class AsyncClient(AsyncTransport):
    """An asyncio beanstalkd client. Connects on ``connect()``, ``async with``, or first call.

    ``timeout`` bounds connecting and the wait for each reply once it is due, i.e. once the
    replies queued before it have arrived (``None``: forever); a ``reserve`` waits for its
    own timeout on top of it.

    Tasks may share one client: their calls pipeline. The used tube and the watch list are
    the connection's, so tasks that ``use`` different tubes should not share one.

    ``address`` may name several servers; ``failover_timeout`` is as in ``Client``.

    Example::

        async with AsyncClient("127.0.0.1:11300") as c:
            await c.use("emails")
            await c.put(b"hello")
            await c.watch("emails")
            job = await c.reserve(timeout=5)
            await c.delete(job)
    """

    # --- producer commands ----------------------------------------------------------------

    async def use(self, tube: str) -> str:
        """Put later jobs into ``tube``. Returns the tube name (the tube in use costs nothing)."""
        req = self._session.use_request(tube)
        if req is not None:
            self._session.used(await self._call(req))
        return tube

    @property
    def using(self) -> str:
        return self._session.using

    async def put(self, body: Body, *, priority: int = rq.DEFAULT_PRIORITY, delay: float = 0,
                  ttr: float = rq.DEFAULT_TTR, tube: str | None = None) -> int:
        """Put a job into ``tube`` (default: the used tube); returns its id."""
        if tube is not None:
            await self.use(tube)
        return await self._call(rq.put(rq.body_bytes(body), priority, delay, ttr))

    async def put_many(self, bodies: Iterable[Body | PutSpec], *, priority: int = rq.DEFAULT_PRIORITY,
                       delay: float = 0, ttr: float = rq.DEFAULT_TTR,
                       tube: str | None = None) -> list[int]:
        """Pipelined puts, as :meth:`stalkd.client.Client.put_many`."""
        if tube is not None:
            await self.use(tube)
        plan = PutMany(bodies, priority=priority, delay=delay, ttr=ttr,
                       resend_not_primary=self._failover.enabled)
        try:
            return await self._drive(failover.put_batches(self._failover, plan,
                                                          clock=time.monotonic,
                                                          closed_by_user=self._user_closed))
        except ProtocolError:
            self._drop()  # an answer we cannot place: the stream may be out of step
            raise

    # --- worker commands ------------------------------------------------------------------

    async def watch(self, tube: str) -> int:
        n = await self._call(rq.watch(tube))
        self._session.watched(tube)
        return n

    async def ignore(self, tube: str) -> int:
        n = await self._call(rq.ignore(tube))
        self._session.ignored(tube)
        return n

    @property
    def watching(self) -> tuple[str, ...]:
        return tuple(self._session.watching)

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

    async def finish(self, job: JobLike, how: str = "delete", *,
                     priority: int = rq.DEFAULT_PRIORITY, delay: float = 0,
                     result: tuple[JobLike, float, bytes] | None = None, reserve: bool = False,
                     timeout: float | None = None,
                     on_acked: Callable[[bool], None] | None = None) -> Finished:
        """``Client.finish``, awaited (cancelling it while it waits for the reserve drops the
        connection, so the server releases what it reserved)."""
        plan = Finish(how, job, priority=priority, delay=delay, result=result,
                      reserve=reserve, timeout=timeout)
        # a reserve waits for its timeout on top of the reply timeout (None: unbounded)
        extra = 0 if not reserve else None if timeout is None else math.ceil(timeout)
        if not self._failover.enabled:
            after = None if on_acked is None else (plan.ack_index, lambda r: on_acked(plan.acked(r)))
            replies = await self._exchange(plan.requests, extra, after)
        else:
            def reply(i: int, resp: Response) -> None:
                if on_acked is not None and i == plan.ack_index:
                    on_acked(plan.acked(resp))

            replies = await self._drive(failover.calls(self._failover, plan.requests, extra,
                                                   clock=time.monotonic,
                                                   closed_by_user=self._user_closed,
                                                   on_reply=reply))
        try:
            return plan.take(replies)
        except ProtocolError:
            self._drop()
            raise

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

    async def result_put(self, job: JobLike, ttl: float, body: bytes | str) -> None:
        """``Client.result_put``."""
        await self._call(rq.result_put(job, ttl, rq.body_bytes(body)))

    async def result_get(self, job: JobLike) -> bytes:
        """``Client.result_get``."""
        return bytes((await self._call(rq.result_get(job))).body)
