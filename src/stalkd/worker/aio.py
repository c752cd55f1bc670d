"""asyncio concurrency: ``concurrency`` tasks on one event loop, each with its own connection.

Async handlers are awaited (with ``asyncio.wait_for`` when the task has a time limit); sync
handlers run in a daemon thread each, so they cannot stall the other slots nor a shutdown. Heartbeat
touches come from the heartbeat thread and are handed to the loop.

Ensures: the same as ``runner``: every reserved job is acted on by its slot or released by
closing its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stalkd.worker import core, unique
from stalkd.worker.context import Action, Bury, Defer, Delete, JobContext, Release
from stalkd.worker.deadletter import RECORD_PRIORITY
from stalkd.worker.errors import TimeLimitExceeded
from stalkd.worker.runner import WorkerBase

if TYPE_CHECKING:
    from stalkd.worker.app import App
    from stalkd.worker.conn import AsyncConn

log = logging.getLogger("stalkd.worker")

__all__ = ["AsyncWorker"]


async def execute(conn: AsyncConn, app: App, job_id: int, ctx: JobContext | None,
                  action: Action) -> bool:
    """The asyncio twin of ``runner.execute`` (same order of writes, same reasons)."""
    ok = True
    if isinstance(action, Delete):
        ok = await conn.delete(job_id)
        if ok and ctx is not None and ctx.header.marker is not None:
            await conn.delete(ctx.header.marker)
    elif isinstance(action, Release):
        ok = await conn.release(job_id, priority=action.priority, delay=action.delay)
    elif isinstance(action, Bury):
        await conn.put(app.failed_tube, action.record.to_json(), priority=RECORD_PRIORITY,
                       delay=0, ttr=120)
        ok = await conn.bury(job_id, priority=action.priority)
    elif isinstance(action, Defer):
        assert ctx is not None
        await conn.put(ctx.tube, ctx.body, priority=ctx.task.priority, delay=action.delay,
                       ttr=ctx.ttr)
        ok = await conn.delete(job_id)
    if not ok:
        log.warning("job %d: no longer reserved by this worker when acting on it (%s); its TTR "
                    "ran out, so it may run again elsewhere", job_id, type(action).__name__)
    return ok


async def _in_daemon_thread(fn: Callable[[Any], Any], arg: Any) -> Any:
    """Run a sync handler off the loop in a daemon thread. Not the loop's default executor:
    ``asyncio.run`` joins that on exit, so one stuck handler would keep a stopped worker alive
    past its grace period (its job is released when our connections close, as in threads mode).
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def run() -> None:
        try:
            result = fn(arg)
        except BaseException as exc:  # handed to the awaiting coroutine, as to_thread would
            with contextlib.suppress(RuntimeError):  # loop already closed: nobody waits
                loop.call_soon_threadsafe(settle, False, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, True, result)

    threading.Thread(target=run, name="stalkd-sync-handler", daemon=True).start()
    return await fut


def _run_sync(args: tuple[App, JobContext]) -> None:
    """A sync handler with its hooks, all on the handler's own thread as in threads mode, so
    the time limit can interrupt it there and stops watching before this returns."""
    app, ctx = args
    ctx.extras["thread_id"] = threading.get_ident()
    core.before(app, ctx)
    try:
        try:
            ctx.result = ctx.task.fn(ctx.payload)
        finally:
            # A time limit firing as the handler returns raises in here at the latest.
            core.handler_exit(app, ctx)
    except Exception as exc:
        core.fail(ctx, exc)


class AsyncWorker(WorkerBase):
    """Runs slots as asyncio tasks; ``run()`` owns its event loop."""

    async def _process(self, conn: AsyncConn, lock: asyncio.Lock, job_id: int, body: bytes) -> None:
        app = self.app
        try:
            ctx = core.begin(app, job_id, body)
        except Exception as exc:
            bad = core.undecodable(job_id, body, exc, now=time.time())
            async with lock:
                await execute(conn, app, job_id, None, bad)
            return
        loop = asyncio.get_running_loop()

        async def touch_async() -> None:
            async with lock:
                await conn.touch(job_id)

        def touch() -> None:
            asyncio.run_coroutine_threadsafe(touch_async(), loop).result(timeout=10)

        ctx.touch = touch
        for key in ctx.header.deps:
            if unique.is_pending(await conn.stats_tube(unique.key_tube(key))):
                action: Action = Defer(ctx.task.options.depends_poll)
                async with lock:
                    await execute(conn, app, job_id, ctx, action)
                core.notify(app, ctx, action)
                return
        if ctx.task.is_async:
            core.before(app, ctx)
            try:
                coro = ctx.task.fn(ctx.payload)
                if ctx.time_limit is not None:
                    try:
                        ctx.result = await asyncio.wait_for(coro, ctx.time_limit)
                    except TimeoutError:
                        raise TimeLimitExceeded(
                            f"job {job_id}: ran past {ctx.time_limit}s") from None
                else:
                    ctx.result = await coro
            except Exception as exc:
                core.fail(ctx, exc)
            finally:
                core.handler_exit(app, ctx)
        else:
            await _in_daemon_thread(_run_sync, (app, ctx))
        async with lock:
            if core.needs_attempt(app, ctx):
                info = await conn.stats_job(job_id)
                ctx.attempt = int(str(info["releases"])) + 1 if info else 1
            action = core.finish(app, ctx)
            await execute(conn, app, job_id, ctx, action)
        core.notify(app, ctx, action)

    async def _slot(self, conns: list[AsyncConn]) -> None:
        from stalkd.worker.conn import AsyncConn

        conn: AsyncConn | None = None
        lock = asyncio.Lock()
        while not self.stopping.is_set():
            try:
                if conn is None:
                    conn = await AsyncConn.open(self.app.address, timeout=self.app.client_timeout)
                    await conn.watch_only(self.tubes)
                    conns.append(conn)
                got = await conn.reserve(timeout=self.reserve_timeout)
                if got is None:
                    continue
                await self._process(conn, lock, got[0], got[1])
                self._counted()
            except Exception as exc:
                if self.stopping.is_set() and isinstance(exc, OSError):
                    break
                if isinstance(exc, OSError):
                    log.warning("async slot: connection to %s lost (%s); reconnecting",
                                self.app.address, exc)
                else:
                    log.exception("async slot: unexpected error; reconnecting")
                if conn is not None:
                    if conn in conns:
                        conns.remove(conn)
                    with contextlib.suppress(OSError):
                        await conn.close()  # hands any job we hold back to the server
                conn = None
                await asyncio.sleep(0.5)  # reconnect backoff, not synchronisation
        if conn is not None and conn in conns:
            conns.remove(conn)
            await conn.close()

    async def _main(self) -> None:
        conns: list[AsyncConn] = []
        slots = [asyncio.create_task(self._slot(conns)) for _ in range(self.concurrency)]
        while not self.stopping.is_set():
            await asyncio.sleep(0.1)  # polls the thread-safe stop flag set by signal handlers
        log.info("draining: no new reservations; in-flight jobs get %.0fs (signal again to "
                 "release them now)", self.grace)
        deadline = time.monotonic() + self.grace
        while (not all(s.done() for s in slots) and not self.stop_now.is_set()
               and time.monotonic() < deadline):
            await asyncio.wait(slots, timeout=0.1)
        for s in slots:
            s.cancel()
        for c in list(conns):
            with contextlib.suppress(OSError):
                await c.close()  # releases whatever those slots still held
        await asyncio.gather(*slots, return_exceptions=True)

    def run(self) -> int:
        for m in self.app.middleware:
            m.on_worker_start(self)
        try:
            asyncio.run(self._main())
        finally:
            for m in self.app.middleware:
                m.on_worker_stop(self)
        log.info("stopped after %d job(s)", self.processed)
        return 0
