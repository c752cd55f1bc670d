"""An in-memory stand-in for a server, with the operations of ``ops.ServerOps``: what
``app.testing()`` runs the real delivery pipeline and producer against.

Time does not pass: a delayed job is reserved only when no ready job is left, and TTRs never
run out. Ensures: a job is in exactly one state (ready, delayed, reserved, buried) until
deleted; ``releases`` and ``buries`` count as beanstalkd's ``stats-job`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MemoryServer", "MemoryJob"]


@dataclass
class MemoryJob:
    id: int
    tube: str
    body: bytes
    priority: int
    delay: int
    ttr: int
    state: str = "ready"   # ready, delayed, reserved, buried
    releases: int = 0
    buries: int = 0


class MemoryServer:
    """Jobs by id; ``watch`` selects the tubes ``reserve`` takes from."""

    def __init__(self) -> None:
        self.jobs: dict[int, MemoryJob] = {}
        self._next_id = 1
        self.watching: list[str] = []

    def close(self) -> None:
        """Nothing to close (the producer's connection interface)."""

    def watch_only(self, tubes: list[str]) -> None:
        self.watching = list(tubes)

    def put(self, tube: str, body: bytes, priority: int, delay: int, ttr: int) -> int:
        job = MemoryJob(self._next_id, tube, bytes(body), priority, delay, ttr,
                        state="delayed" if delay > 0 else "ready")
        self._next_id += 1
        self.jobs[job.id] = job
        return job.id

    def put_many(self, tube: str, bodies: list[bytes], priority: int, delay: int,
                 ttr: int) -> list[int]:
        return [self.put(tube, b, priority, delay, ttr) for b in bodies]

    def in_tube(self, tube: str, *states: str) -> list[MemoryJob]:
        return [j for j in self.jobs.values() if j.tube == tube and j.state in states]

    def reserve(self, timeout: float | None = 0) -> tuple[int, bytes] | None:
        """The most urgent job of the watched tubes: ready before delayed, then by priority
        and id (``None`` when there is none)."""
        waiting = [j for j in self.jobs.values()
                   if j.tube in self.watching and j.state in ("ready", "delayed")]
        if not waiting:
            return None
        job = min(waiting, key=lambda j: (j.state == "delayed", j.priority, j.id))
        job.state = "reserved"
        return job.id, job.body

    def delete(self, job_id: int) -> bool:
        return self.jobs.pop(job_id, None) is not None

    def release(self, job_id: int, priority: int, delay: int) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state != "reserved":
            return False
        job.state, job.priority, job.delay = ("delayed" if delay > 0 else "ready"), priority, delay
        job.releases += 1
        return True

    def bury(self, job_id: int, priority: int) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state != "reserved":
            return False
        job.state, job.priority = "buried", priority
        job.buries += 1
        return True

    def kick_job(self, job_id: int) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state not in ("buried", "delayed"):
            return False
        job.state = "ready"
        return True

    def touch(self, job_id: int) -> None:
        """TTRs never run out here."""

    def fetch_results(self, backend: Any, job_ids: tuple[int, ...]) -> list[bytes | None]:
        return [backend.fetch(jid) for jid in job_ids]

    def store_result(self, backend: Any, job_id: int, data: bytes, ttl: float) -> bool:
        backend.store(job_id, data, ttl)
        return True

    def finish(self, how: str, job_id: int, priority: int, delay: int,
               result: tuple[Any, int, bytes, float] | None) -> tuple[bool, None]:
        """``ServerOps.finish`` without the reserve (``app.testing()`` delivers job by job)."""
        if result is not None:
            self.store_result(*result)
        if how == "delete":
            return self.delete(job_id), None
        if how == "release":
            return self.release(job_id, priority, delay), None
        return self.bury(job_id, priority), None

    def stats_job(self, job_id: int) -> dict[str, Any] | None:
        job = self.jobs.get(job_id)
        if job is None:
            return None
        return {"id": job.id, "tube": job.tube, "state": job.state, "pri": job.priority,
                "delay": job.delay, "ttr": job.ttr, "releases": job.releases,
                "buries": job.buries}

    def stats_tube(self, tube: str) -> dict[str, Any] | None:
        jobs = [j for j in self.jobs.values() if j.tube == tube]
        if not jobs:
            return None
        return {"name": tube, "current-jobs-ready": sum(j.state == "ready" for j in jobs),
                "total-jobs": len(jobs)}

    def peek(self, job_id: int) -> tuple[int, bytes] | None:
        job = self.jobs.get(job_id)
        return None if job is None else (job.id, job.body)

    def peek_delayed(self, tube: str) -> tuple[int, bytes] | None:
        delayed = self.in_tube(tube, "delayed")
        if not delayed:
            return None
        job = min(delayed, key=lambda j: (j.delay, j.id))  # time does not pass: shortest first
        return job.id, job.body

    def peek_ready(self, tube: str) -> tuple[int, bytes] | None:
        ready = self.in_tube(tube, "ready")
        if not ready:
            return None
        job = min(ready, key=lambda j: (j.priority, j.id))
        return job.id, job.body
