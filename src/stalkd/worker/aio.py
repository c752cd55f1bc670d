"""The asyncio driver of the delivery pipeline: ``concurrency`` slots on one event loop, each
with its own connection.

Async handlers run as a task of their own (the time limit cancels it); sync handlers run in a
daemon thread each, so they cannot stall the other slots nor a shutdown, with the same hooks in
the same order as in threads mode (``syncrun.run_sync``). Heartbeat touches come from the
heartbeat thread and are handed to the loop.

Ensures: the same as ``runner``: every reserved job is acted on by its slot or released by
closing its connection; a slot waiting in ``reserve`` is cancelled at once on ``stop()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from stalkd.client import errors
from stalkd.worker import pipeline, syncrun
from stalkd.worker.cancel import JobCancelled, current
from stalkd.worker.context import JobContext
from stalkd.worker.denied import BURY_PRIORITY, Refused, buried, what
from stalkd.worker.errors import TimeLimitExceeded
from stalkd.worker.ops import AsyncServerOps, Reserved
from stalkd.worker.pipeline import Call, Delivered, Step
from stalkd.worker.registry import Registry
from stalkd.worker.runner import WorkerBase

log = logging.getLogger("stalkd.worker")

__all__ = ["AsyncWorker", "drive_async", "run_async"]


async def drive_async(steps: Generator[Step, Any, Delivered], ops: AsyncServerOps,
                      app: Registry, lock: asyncio.Lock, touch: Callable[[], None],
                      last: Callable[..., Awaitable[Any]] | None = None) -> Delivered:
    """Carry out a delivery's steps on ``ops`` (under ``lock``, shared with heartbeats);
    ``touch`` is the job's thread-safe heartbeat; ``last`` as in ``runner.drive``."""
    reply: Any = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration as done:
            result: Delivered = done.value
            return result
        if isinstance(step, Call):
            if step.last and last is not None:
                return await _last(steps, step, last, lock)
            try:
                async with lock:
                    reply = await getattr(ops, step.op)(*step.args)
            except OSError as exc:
                pipeline.call_failed(step, exc)
                raise
            except errors.PermissionDenied as exc:
                raise Refused(what(step.op, step.args)) from exc
        else:
            step.ctx.touch = touch
            if step.ctx.task.is_async:
                await run_async(app, step.ctx)
            else:
                await _in_daemon_thread(syncrun.run_sync, app, step.ctx)
            reply = None


async def _last(steps: Generator[Step, Any, Delivered], step: Call,
                last: Callable[..., Awaitable[Any]], lock: asyncio.Lock) -> Delivered:
    """``runner._last``, awaited."""
    acked = pipeline.LastAck(steps, step)
    try:
        async with lock:
            await last(*step.args, on_acked=acked)
    except OSError as exc:
        acked.failed(exc)
        raise
    except errors.PermissionDenied as exc:
        raise Refused(what(step.op, step.args)) from exc
    return acked.done[0]


async def run_async(app: Registry, ctx: JobContext) -> None:
    """Run an async handler as its own task, hooks in the order ``syncrun.run_sync`` keeps."""
    loop = asyncio.get_running_loop()
    pipeline.handler_started(app, ctx)
    token = current.set(ctx)  # copied into the handler's task: what cancelled() reads
    try:
        task = loop.create_task(ctx.task.fn(ctx.payload))
    finally:
        current.reset(token)

    def interrupt() -> None:
        loop.call_soon_threadsafe(task.cancel)

    ctx.interrupt = ctx.on_cancel = interrupt
    if ctx.cancel_requested:  # asked while before_process ran, before there was a task to cancel
        interrupt()
    try:
        try:
            ctx.result = await asyncio.shield(task)
        finally:
            pipeline.handler_ended(app, ctx)
    except asyncio.CancelledError:
        if ctx.interrupted:
            pipeline.handler_failed(ctx, TimeLimitExceeded())
        elif ctx.cancel_requested and task.cancelled():
            pipeline.handler_failed(ctx, JobCancelled(
                f"job {ctx.job_id}: task {ctx.task.name} cancelled on request"))
        else:
            task.cancel()  # the slot itself is being cancelled (shutdown)
            raise
    except Exception as exc:
        pipeline.handler_failed(ctx, exc)


async def _in_daemon_thread(fn: Any, app: Registry, ctx: JobContext) -> None:
    """Run a sync handler off the loop in a daemon thread. Not the loop's default executor:
    ``asyncio.run`` joins that on exit, so one stuck handler would keep a stopped worker alive
    past its grace period (its job is released when our connections close, as in threads mode).
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def settle(exc: BaseException | None) -> None:
        if not fut.done():
            fut.set_result(None) if exc is None else fut.set_exception(exc)

    def run() -> None:
        exc: BaseException | None = None
        try:
            fn(app, ctx)
        except BaseException as e:  # handed to the awaiting coroutine, as to_thread would
            exc = e
        with contextlib.suppress(RuntimeError):  # loop already closed: nobody waits
            loop.call_soon_threadsafe(settle, exc)

    threading.Thread(target=run, name="stalkd-sync-handler", daemon=True).start()
    await fut


class AsyncWorker(WorkerBase):
    """Runs slots as asyncio tasks; ``run()`` owns its event loop."""

    async def _process(self, conn: AsyncServerOps, lock: asyncio.Lock, job_id: int,
                       body: bytes) -> Reserved | None:
        """Deliver one job; returns the job its last call reserved (see ``runner``)."""
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        assert me is not None
        got: Reserved | None = None

        async def touch_async() -> None:
            async with lock:
                await conn.touch(job_id)

        def touch() -> None:
            asyncio.run_coroutine_threadsafe(touch_async(), loop).result(timeout=10)

        acked: list[bool] = []

        async def last(how: str, job_id: int, priority: int, delay: int, result: Any, *,
                       on_acked: Callable[[bool], None]) -> None:
            nonlocal got

            def idle(ok: bool) -> None:  # the acknowledgement is in: a stop may cancel the reserve
                acked.append(ok)
                on_acked(ok)
                self._reserving.add(me)

            try:
                _, got = await conn.finish(how, job_id, priority, delay, result, reserve=True,
                                           timeout=self.reserve_timeout, on_acked=idle)
            except asyncio.CancelledError:
                if not acked or not self.stopping.is_set():
                    raise
                me.uncancel()  # the stop woke the reserve, not the delivery: it ended as acked
            finally:
                self._reserving.discard(me)

        await drive_async(pipeline.deliver(self.app, job_id, body), conn, self.app, lock,
                          touch, last)
        return got

    async def _slot(self, conns: list[AsyncServerOps]) -> None:
        conn: AsyncServerOps | None = None
        lock = asyncio.Lock()
        got: Reserved | None = None  # the job the last delivery's finish reserved
        held: int | None = None  # the job being delivered
        while not self.stopping.is_set():
            try:
                if conn is None:
                    conn = await AsyncServerOps.open(self.app.address,
                                                     timeout=self.app.client_timeout)
                    conns.append(conn)
                    try:
                        await conn.watch_only(self.tubes)
                    except errors.PermissionDenied as exc:
                        raise Refused(what("watch_only", (self.tubes,))) from exc
                if got is None:
                    me = asyncio.current_task()
                    assert me is not None
                    self._reserving.add(me)
                    try:
                        got = await conn.reserve(timeout=self.reserve_timeout)
                    except errors.PermissionDenied as exc:
                        raise Refused(what("reserve", (", ".join(self.tubes),))) from exc
                    finally:
                        self._reserving.discard(me)
                    if got is None:
                        continue
                job, got = got, None
                held = job[0]
                got = await self._process(conn, lock, job[0], job[1])
                held = None
                self.denials.passed()
                self._counted()
            except asyncio.CancelledError:
                if not self.stopping.is_set():
                    raise
                break  # woken from reserve by the stop: the server releases what it had
            except Refused as exc:  # runner.ThreadWorker's, awaited
                got = None
                self.denials.report(exc.done, exc.__cause__ or exc)
                kept = False
                if conn is not None and held is not None:
                    with contextlib.suppress(OSError, errors.BeanstalkError):
                        if await conn.bury(held, BURY_PRIORITY):
                            buried(held)
                        kept = True
                if conn is not None and not kept:
                    if conn in conns:
                        conns.remove(conn)
                    with contextlib.suppress(OSError):
                        await conn.close()
                    conn = None
                held = None
                await asyncio.sleep(self.denials.pause())  # waiting for the operator's reload
            except Exception as exc:
                got = None  # reserved on the connection closed below: the server releases it
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
        conns: list[AsyncServerOps] = []
        self._reserving: set[asyncio.Task[Any]] = set()
        slots = [asyncio.create_task(self._slot(conns)) for _ in range(self.concurrency)]
        while not self.stopping.is_set():
            await asyncio.sleep(0.1)  # polls the thread-safe stop flag set by signal handlers
        for s in list(self._reserving):
            s.cancel()  # idle slots stop now; a cancelled reserve drops its connection
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
