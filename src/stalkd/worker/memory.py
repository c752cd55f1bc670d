"""The real engine in this process, with the operations of ``ops.ServerOps``: what
``app.testing()`` runs the real delivery pipeline and producer against.

There is one model of job semantics: ``stalkd.engine.Engine``, the server's own state machine,
driven here over a virtual clock instead of a socket. Time passes only when a reserve finds no
ready job: the clock then jumps to the next delayed job's deadline, so a delayed job is
reserved once nothing ready is left, and a test never waits. ``advance(seconds)`` moves the
clock by hand (a TTR running out, a delay ending).

Ensures: every answer is the engine's (states, priorities, ``releases``/``buries`` counters,
which job a reserve takes); ``jobs`` is a snapshot of the engine's live jobs, read afresh on
each access.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stalkd.engine import Engine
from stalkd.engine.model import Op, Record
from stalkd.engine.replay import replay
from stalkd.protocol import commands as C

__all__ = ["MemoryServer", "MemoryJob"]

_CONN = 1  # the producers' connection (puts, peeks, stats); each reservation has its own


@dataclass(frozen=True)
class MemoryJob:
    """One live job as ``stats-job`` and ``peek`` show it."""

    id: int
    tube: str
    body: bytes
    priority: int
    delay: int
    ttr: int
    state: str  # ready, delayed, reserved, buried
    releases: int = 0
    buries: int = 0


class MemoryServer:
    """One engine; ``watch_only`` selects the tubes ``reserve`` takes from. Each reservation
    is held by a connection of its own, as a worker slot's is, so ``worker_died`` gives one job
    back the way the server does when a worker's connection drops."""

    def __init__(self) -> None:
        self.engine = Engine()
        self.now = 0.0  # the virtual clock, in seconds
        self.engine.connect(_CONN, self.now)
        self.watching: list[str] = ["default"]
        self._ids: set[int] = set()  # every id put; the engine says which are still live
        self._holder: dict[int, int] = {}  # reserved job id -> the connection holding it
        self._next_conn = _CONN + 1

    def _do(self, cmd: C.Command, conn: int = _CONN) -> Any:
        return self.engine.apply(conn, cmd, self.now).reply

    def _slot(self) -> int:
        """A new connection watching ``watching`` only."""
        conn, self._next_conn = self._next_conn, self._next_conn + 1
        self.engine.connect(conn, self.now)
        for tube in self.watching:
            self._do(C.Watch(tube), conn)
        if "default" not in self.watching:
            self._do(C.Ignore("default"), conn)
        return conn

    def _take(self, conn: int, cmd: C.Command) -> tuple[int, bytes] | None:
        reply = self._do(cmd, conn)
        if isinstance(reply, C.JobReply):
            self._holder[reply.id] = conn
            return reply.id, reply.body
        self.engine.disconnect(conn, self.now)
        return None

    def _done_with(self, job_id: int, cmd: C.Command, word: str) -> bool:
        conn = self._holder.get(job_id, _CONN)
        ok = bool(self._do(cmd, conn).word == word)
        if ok and conn != _CONN:
            del self._holder[job_id]
            self.engine.disconnect(conn, self.now)
        return ok

    def worker_died(self, job_id: int) -> None:
        """The connection holding ``job_id`` drops: the engine gives the job back (ready)."""
        conn = self._holder.pop(job_id)
        self.engine.disconnect(conn, self.now)
        self._settle()

    def close(self) -> None:
        """Nothing to close (the producer's connection interface)."""

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, running every timer that falls due."""
        self.now += seconds
        self._settle()

    def _settle(self) -> None:
        self.engine.tick(self.now)
        while self.engine.behind():  # a step moves a bounded number of jobs
            self.engine.tick(self.now)

    @property
    def jobs(self) -> dict[int, MemoryJob]:
        """The live jobs by id, in id order."""
        out = {}
        for job_id in sorted(self._ids):
            job = self.stats_job(job_id)
            found = self.peek(job_id)
            if job is None or found is None:
                self._ids.discard(job_id)
                continue
            out[job_id] = MemoryJob(job_id, str(job["tube"]), found[1], int(job["pri"]),
                                    int(job["delay"]), int(job["ttr"]), str(job["state"]),
                                    int(job["releases"]), int(job["buries"]))  # fmt: skip
        return out

    def in_tube(self, tube: str, *states: str) -> list[MemoryJob]:
        return [j for j in self.jobs.values() if j.tube == tube and j.state in states]

    def watch_only(self, tubes: list[str]) -> None:
        self.watching = list(tubes)

    def put(self, tube: str, body: bytes, priority: int, delay: int, ttr: int) -> int:
        self._do(C.Use(tube))
        reply = self._do(C.Put(priority, delay, ttr, bytes(body)))
        if reply.word != "INSERTED":
            raise ValueError(f"put into {tube!r}: {reply.word}")
        job_id = int(reply.args[0])
        self._ids.add(job_id)
        return job_id

    def put_many(self, tube: str, bodies: list[bytes], priority: int, delay: int,
                 ttr: int) -> list[int]:
        return [self.put(tube, b, priority, delay, ttr) for b in bodies]

    def reserve(self, timeout: float | None = 0) -> tuple[int, bytes] | None:
        """The job a server would give a worker watching ``watching``; when none is ready, the
        clock jumps to the next delay's end first (``None`` when nothing is waiting at all)."""
        self._settle()
        while True:
            got = self._take(self._slot(), C.ReserveWithTimeout(0))
            if got is not None:
                return got
            due = self.engine.next_deadline()
            if due is None or not self._delayed_watched():
                return None
            self.now = max(self.now, due)
            self._settle()

    def _delayed_watched(self) -> bool:
        return any((self.stats_tube(t) or {}).get("current-jobs-delayed", 0) for t in self.watching)

    def reserve_job(self, job_id: int) -> tuple[int, bytes] | None:
        """``reserve-job``: this job, whatever its state (``None`` when it is gone)."""
        return self._take(self._slot(), C.ReserveJob(job_id))

    def restore(self, job_id: int, tube: str, body: bytes, priority: int, ttr: int) -> None:
        """Bring back a job that was deleted, as a restart from a log whose delete was lost
        would: the same id, ready (the engine's own replay rule for a PUT record)."""
        us = round(self.now * 1_000_000)
        replay(self.engine, Record(Op.PUT, self.engine.seq + 1, us, job_id, tube, priority, 0,
                                   ttr, 0, bytes(body), created_us=us))  # fmt: skip
        self._ids.add(job_id)

    def delete(self, job_id: int) -> bool:
        return self._done_with(job_id, C.Delete(job_id), "DELETED")

    def release(self, job_id: int, priority: int, delay: int) -> bool:
        return self._done_with(job_id, C.Release(job_id, priority, delay), "RELEASED")

    def bury(self, job_id: int, priority: int) -> bool:
        return self._done_with(job_id, C.Bury(job_id, priority), "BURIED")

    def kick_job(self, job_id: int) -> bool:
        return bool(self._do(C.KickJob(job_id)).word == "KICKED")

    def touch(self, job_id: int) -> None:
        self._do(C.Touch(job_id), self._holder.get(job_id, _CONN))

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
        reply = self._do(C.StatsJob(job_id))
        return dict(reply.values) if isinstance(reply, C.YamlDict) else None

    def stats_tube(self, tube: str) -> dict[str, Any] | None:
        reply = self._do(C.StatsTube(tube))
        return dict(reply.values) if isinstance(reply, C.YamlDict) else None

    def peek(self, job_id: int) -> tuple[int, bytes] | None:
        reply = self._do(C.Peek(job_id))
        return (reply.id, reply.body) if isinstance(reply, C.JobReply) else None

    def _peek_in(self, tube: str, cmd: C.Command) -> tuple[int, bytes] | None:
        self._do(C.Use(tube))
        reply = self._do(cmd)
        return (reply.id, reply.body) if isinstance(reply, C.JobReply) else None

    def peek_delayed(self, tube: str) -> tuple[int, bytes] | None:
        return self._peek_in(tube, C.PeekDelayed())

    def peek_ready(self, tube: str) -> tuple[int, bytes] | None:
        return self._peek_in(tube, C.PeekReady())
