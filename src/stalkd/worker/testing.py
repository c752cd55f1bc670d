"""In-process mode for users' tests: ``app.testing()`` replaces the server with a small broker.

>>> from stalkd.worker.app import App
>>> app = App(middleware=[])
>>> seen = []
>>> @app.task
... def record(payload: int) -> None:
...     seen.append(payload)
>>> with app.testing() as t:
...     _ = record.put(1)
...     t.consume_one().action
Delete()
>>> seen
[1]

Collecting mode (default) queues jobs until ``consume_one()`` / ``drain()``; ``eager=True`` runs
each job at ``put``, retries included. ``force_retry()`` delivers the last completed job again,
as a server would after a worker died between the job's side effects and its delete: use it to
prove a task is idempotent. Delays are recorded, not waited for. Jobs go through the same
``core`` steps and middleware as on a real worker.

Ensures: a job is in exactly one of ``queued``, ``failed`` (dead letters) or done; unique keys
are held from put until the job completes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from stalkd.worker import core
from stalkd.worker.context import Action, Bury, DeadLetter, Defer, Delete, Release

if TYPE_CHECKING:
    from stalkd.worker.app import App, Task

__all__ = ["TestingSession", "QueuedJob", "Consumed"]


@dataclass(frozen=True)
class QueuedJob:
    id: int
    body: bytes
    priority: int
    delay: int
    releases: int = 0


@dataclass(frozen=True)
class Consumed:
    """What ``consume_one`` did: the job, the attempt it was, and the resulting action."""

    job: QueuedJob
    attempt: int
    action: Action
    exception: BaseException | None


class TestingSession:
    """The broker behind ``app.testing()``; see the module docstring."""

    __test__ = False  # not a pytest test class

    def __init__(self, app: App, *, eager: bool, raise_errors: bool) -> None:
        self.app = app
        self.eager = eager
        self.raise_errors = raise_errors
        self.queued: list[QueuedJob] = []
        self.failed: list[DeadLetter] = []
        self.completed: list[QueuedJob] = []
        self._keys: set[str] = set()
        self._next_id = 1

    # Producer interface -------------------------------------------------------------------
    def put_job(self, task: Task, payload: Any, *, delay: int, priority: int, ttr: int,
                key: str | None, deps: tuple[str, ...]) -> int | None:
        if key is not None and key in self._keys:
            return None
        body = task.encode(payload, key=key, deps=deps, ttr=ttr)
        if key is not None:
            self._keys.add(key)
        job = QueuedJob(id=self._next_id, body=body, priority=priority, delay=delay)
        self._next_id += 1
        self.queued.append(job)
        if self.eager:
            self._run_until_settled(job.id)
        return job.id

    # Test API -----------------------------------------------------------------------------
    def consume_one(self) -> Consumed:
        """Run the most urgent queued job (not delayed, lowest priority value, oldest) once."""
        if not self.queued:
            raise LookupError("no queued job to consume")
        # Delays are not waited for, but a delayed job only runs once nothing is ready.
        job = min(self.queued, key=lambda j: (j.delay > 0, j.priority, j.id))
        self.queued.remove(job)
        return self._deliver(job)

    def drain(self, max_deliveries: int = 10_000) -> list[Consumed]:
        """Consume until nothing is queued (dead letters end up in ``failed``)."""
        out: list[Consumed] = []
        while self.queued:
            if len(out) >= max_deliveries:
                raise RuntimeError(f"drain: still {len(self.queued)} queued after "
                                   f"{max_deliveries} deliveries (a dependency never completes?)")
            out.append(self.consume_one())
        return out

    def force_retry(self) -> Consumed:
        """Deliver the last completed job once more, as after a crash before its delete."""
        if not self.completed:
            raise LookupError("no completed job to deliver again")
        return self._deliver(self.completed[-1], redelivery=True)

    # ------------------------------------------------------------------------------------------
    def _run_until_settled(self, job_id: int) -> None:
        while any(j.id == job_id for j in self.queued):
            job = next(j for j in self.queued if j.id == job_id)
            self.queued.remove(job)
            result = self._deliver(job)
            if isinstance(result.action, Bury) and self.raise_errors and result.exception:
                raise result.exception
            if isinstance(result.action, Defer):
                raise RuntimeError(f"eager mode: job {job_id} depends on a pending key; "
                                   "use collecting mode (eager=False) for dependencies")

    def _deliver(self, job: QueuedJob, *, redelivery: bool = False) -> Consumed:
        try:
            ctx = core.begin(self.app, job.id, job.body)
        except Exception as exc:
            bury = core.undecodable(job.id, job.body, exc, now=time.time())
            self.failed.append(bury.record)
            return Consumed(job, 1, bury, exc)
        ctx.attempt = job.releases + 1
        pending = [k for k in ctx.header.deps if k in self._keys]
        if pending and not redelivery:
            defer = Defer(ctx.task.options.depends_poll)
            self.queued.append(replace(job, id=self._next_id, delay=defer.delay))
            self._next_id += 1
            core.notify(self.app, ctx, defer)
            return Consumed(job, ctx.attempt, defer, None)
        core.before(self.app, ctx)
        try:
            result = ctx.task.fn(ctx.payload)
            if asyncio.iscoroutine(result):
                result = asyncio.run(result)
            ctx.result = result
        except Exception as exc:
            core.fail(ctx, exc)
        finally:
            core.handler_exit(self.app, ctx)
        action = core.finish(self.app, ctx)
        if isinstance(action, Delete):
            if ctx.header.key is not None:
                self._keys.discard(ctx.header.key)
            if not redelivery:
                self.completed.append(job)
        elif isinstance(action, Release):
            self.queued.append(replace(job, releases=job.releases + 1, delay=action.delay,
                                       priority=action.priority))
        elif isinstance(action, Bury):
            self.failed.append(action.record)
        core.notify(self.app, ctx, action)
        return Consumed(job, ctx.attempt, action, ctx.exception)
