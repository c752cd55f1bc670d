"""In-process mode for users' tests: ``app.testing()`` swaps the server for an in-memory one.

>>> from stalkd.worker.app import App
>>> app = App(middleware=[])
>>> seen = []
>>> @app.task
... def record(payload: int) -> None:
...     seen.append(payload)
>>> with app.testing() as t:
...     _ = record.put(1)
...     t.consume_one().action
Complete()
>>> seen
[1]

Collecting mode (default) queues jobs until ``consume_one()`` / ``drain()``; ``eager=True`` runs
each job at ``put``, retries included. ``force_retry()`` delivers the last completed job again,
as a server would after a worker died between the job's side effects and its delete: use it to
prove a task is idempotent. Delays are not waited for: the clock jumps to them when nothing
else is ready (``t.server.advance(seconds)`` moves it by hand).

Jobs go through the real producer (unique keys included), the real delivery pipeline and
middleware, driven as in threads mode, and the server's own engine (``memory.MemoryServer``:
``stalkd.engine.Engine`` over a virtual clock, so delays never make a test wait).

Ensures: a job is in exactly one of ``queued``, ``failed`` (dead letters) or done; unique keys
are held from put until the job completes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stalkd.worker import pipeline
from stalkd.worker.actions import Complete, DeadLetter, GiveUp, WaitForDeps, WorkerAction
from stalkd.worker.memory import MemoryJob, MemoryServer
from stalkd.worker.producer import ServerProducer
from stalkd.worker.registry import Registry
from stalkd.worker.results import MemoryResults
from stalkd.worker.runner import drive
from stalkd.worker.task import Task

__all__ = ["TestingSession", "QueuedJob", "Consumed"]


@dataclass(frozen=True)
class QueuedJob:
    id: int
    body: bytes
    priority: int
    delay: int
    releases: int = 0
    tube: str = ""


@dataclass(frozen=True)
class Consumed:
    """What ``consume_one`` did: the job, the attempt it was, and the resulting action."""

    job: QueuedJob
    attempt: int
    action: WorkerAction
    exception: BaseException | None


def _queued(job: MemoryJob, releases: int | None = None) -> QueuedJob:
    return QueuedJob(job.id, job.body, job.priority, job.delay,
                     job.releases if releases is None else releases, job.tube)


class TestingSession:
    """The producer behind ``app.testing()``; see the module docstring."""

    __test__ = False  # not a pytest test class

    def __init__(self, app: Registry, *, eager: bool, raise_errors: bool,
                 unique_ttl: float | None = None) -> None:
        self.app = app
        self.eager = eager
        self.raise_errors = raise_errors
        self.server = MemoryServer()
        self.completed: list[QueuedJob] = []
        self._producer = ServerProducer(lambda: self.server, unique_ttl=unique_ttl)
        self.results = MemoryResults()  # outcomes of tasks with a result_ttl (app.results)

    @property
    def queued(self) -> list[QueuedJob]:
        """Jobs of the app's tubes waiting to run (ready or delayed), in id order."""
        tubes = set(self.app.tubes)
        return [_queued(j) for j in self.server.jobs.values()
                if j.tube in tubes and j.state in ("ready", "delayed")]

    @property
    def failed(self) -> list[DeadLetter]:
        """Dead-letter records in the failed tube, oldest first."""
        return [DeadLetter.from_json(j.body)
                for j in self.server.in_tube(self.app.failed_tube, "ready")]

    # Producer interface -------------------------------------------------------------------
    def put_job(self, task: Task[Any], payload: Any, *, delay: int, priority: int, ttr: int,
                key: str | None, deps: tuple[str, ...], inputs: tuple[int, ...] = (),
                gather: bool = False, result_ttl: float | None = None) -> int | None:
        job_id = self._producer.put_job(task, payload, delay=delay, priority=priority, ttr=ttr,
                                        key=key, deps=deps, inputs=inputs, gather=gather,
                                        result_ttl=result_ttl)
        if job_id is not None and self.eager:
            self._run_until_settled(job_id)
        return job_id

    def put_jobs(self, task: Task[Any], payloads: Iterable[Any], *, delay: int, priority: int,
                 ttr: int) -> list[int]:
        ids = self._producer.put_jobs(task, payloads, delay=delay, priority=priority, ttr=ttr)
        if self.eager:
            for job_id in ids:
                self._run_until_settled(job_id)
        return ids

    async def aput_job(self, task: Task[Any], payload: Any, *, delay: int, priority: int,
                       ttr: int, deps: tuple[str, ...]) -> int:
        job_id = self.put_job(task, payload, delay=delay, priority=priority, ttr=ttr, key=None,
                              deps=deps)
        assert job_id is not None  # no key, so never a duplicate
        return job_id

    def cancel(self, job_id: int) -> bool:
        return self._producer.cancel(job_id)

    def holder(self, key: str) -> int | None:
        return self._producer.holder(key)

    def job_state(self, job_id: int) -> str | None:
        return self._producer.job_state(job_id)

    # Test API -----------------------------------------------------------------------------
    def consume_one(self) -> Consumed:
        """Run the most urgent queued job (ready before delayed, lowest priority value, oldest)."""
        self.server.watch_only(self.app.tubes)
        got = self.server.reserve()
        if got is None:
            raise LookupError("no queued job to consume")
        return self._deliver(self.server.jobs[got[0]])

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
        done = self.completed[-1]
        self.server.restore(done.id, done.tube, done.body, done.priority, ttr=120)
        self.server.reserve_job(done.id)
        return self._deliver(self.server.jobs[done.id], releases=done.releases)

    # ------------------------------------------------------------------------------------------
    def _run_until_settled(self, job_id: int) -> None:
        job = self.server.jobs.get(job_id)
        while job is not None and job.state in ("ready", "delayed"):
            self.server.reserve_job(job_id)
            result = self._deliver(job)
            if isinstance(result.action, GiveUp) and self.raise_errors and result.exception:
                raise result.exception
            if isinstance(result.action, WaitForDeps):
                raise RuntimeError(f"eager mode: job {job_id} depends on a pending key; "
                                   "use collecting mode (eager=False) for dependencies")
            job = self.server.jobs.get(job_id)

    def _deliver(self, job: MemoryJob, releases: int | None = None) -> Consumed:
        """Drive the real pipeline for reserved ``job``, as a worker slot would (``releases``:
        the count it had, where a restore started it afresh)."""
        before = _queued(job, releases)
        done = drive(pipeline.deliver(self.app, job.id, job.body, tube=job.tube),
                     self.server, self.app)
        attempt = before.releases + 1
        if done.ctx is not None and done.ctx.attempt is not None:
            attempt = done.ctx.attempt
        if isinstance(done.action, Complete) and done.acked:
            self.completed.append(before)
        return Consumed(before, attempt, done.action, done.exception)
