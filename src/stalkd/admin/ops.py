"""What the admin endpoint may do to a running server: read views, and bulk mutations.

``AdminOps`` is the whole interface between the HTTP layer and the server: reads return plain
dicts built by ``views`` (computed on demand, nothing kept per job); every mutation runs the
protocol's commands through an ``AdminSession`` (see session.py: same admission, WAL and
durability path as a client command) and returns only once its changes are durable.

Bulk operations run in chunks: at most ``CHUNK`` jobs or ``CHUNK_SECONDS`` of loop time per
chunk, then the loop serves everyone else before the next one, so other clients see a stall
of about one chunk however many jobs are touched.

A move is put-into-the-new-tube then delete (the job gets a new id, reported old -> new): the
WAL has no "move" record, and the pair runs in one loop step, so both land in the same WAL
batch. The job keeps its state: a delayed job keeps its remaining delay, a buried one is
reserved and buried again in its new tube. Reserved jobs are never touched by bulk operations
(a worker holds them); they are reported as skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from stalkd.admin import views
from stalkd.admin.session import AdminSession
from stalkd.engine import commands as C
from stalkd.engine.job import US
from stalkd.engine.model import JobState

if TYPE_CHECKING:
    from stalkd.server.app import Server

__all__ = ["AdminOps", "BadRequest", "CHUNK", "FAILED_TUBE"]

CHUNK = 512  # jobs per chunk of a bulk operation
CHUNK_SECONDS = 0.002  # loop time per chunk before yielding to other clients
FAILED_TUBE = "stalkd.failed"  # where stalkd workers put dead-letter records
MAX_PAGE = 1000


class BadRequest(ValueError):
    """The request names an unknown state, a bad id, or no jobs at all."""


def parse_state(name: str | None) -> JobState | None:
    if name in (None, "", "all"):
        return None
    try:
        return views.STATES[name]
    except KeyError:
        raise BadRequest(f"unknown state {name!r} (ready, reserved, delayed, buried or all)") from None


class AdminOps:
    """Reads and mutations on one server (all on its event loop)."""

    def __init__(self, server: Server, *, failed_tube: str = FAILED_TUBE) -> None:
        self.server = server
        self.engine = server.engine
        self.failed_tube = failed_tube
        self._letters: tuple[tuple[int, int], dict[int, dict[str, Any]]] = ((-1, -1), {})

    def now_us(self) -> int:
        return round(self.server.clock() * US)

    # --- reads -------------------------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        now = self.now_us()
        return {"server": views.server_row(self.engine), "tubes": views.tube_rows(self.engine, now)}

    def tube(self, name: str) -> dict[str, Any] | None:
        t = self.engine.tubes.get(name)
        return None if t is None else views.tube_row(t, self.now_us())

    def jobs(self, tube: str, state: str | None, after: int = 0, limit: int = 100) -> dict[str, Any]:
        st = parse_state(state)
        limit = max(1, min(limit, MAX_PAGE))
        page, cursor = views.jobs_page(self.engine, tube, st, after=after, limit=limit)
        now = self.now_us()
        letters = self.dead_letters() if st in (None, JobState.BURIED) else {}
        rows = []
        for j in page:
            row = views.job_row(j, now)
            letter = letters.get(j.id)
            if letter is not None:
                row["error"] = letter["error"]
                row["attempts"] = letter["attempts"]
            rows.append(row)
        return {"tube": tube, "state": state or "all", "jobs": rows, "next": cursor}

    def job(self, job_id: int) -> dict[str, Any] | None:
        j = self.engine.jobs.get(job_id)
        if j is None:
            return None
        row = views.job_row(j, self.now_us(), preview=64 * 1024)
        row["dead_letter"] = self.dead_letters().get(job_id)
        return row

    def dead_letters(self) -> dict[int, dict[str, Any]]:
        """Original job id -> its newest dead-letter record in the failed tube (parsed once per
        change of that tube, so a dashboard polling every second costs a dict lookup)."""
        t = self.engine.tubes.get(self.failed_tube)
        if t is None:
            return {}
        key = (t.total_jobs, t.cmd_delete)
        if key == self._letters[0]:
            return self._letters[1]
        from stalkd.worker.context import DeadLetter

        found: dict[int, tuple[int, dict[str, Any]]] = {}
        for j in views.jobs_of(self.engine, t, None):
            try:
                rec = DeadLetter.from_json(j.body)
            except (ValueError, KeyError, TypeError):
                continue  # a foreign job in the failed tube
            old = found.get(rec.job_id)
            if old is None or old[0] < j.id:
                found[rec.job_id] = (j.id, {
                    "record_id": j.id, "tube": rec.tube, "task": rec.task,
                    "attempts": rec.attempts, "error": rec.error, "traceback": rec.traceback,
                    "failed_at": rec.failed_at,
                })  # fmt: skip
        letters = {k: v for k, (_, v) in found.items()}
        self._letters = (key, letters)
        return letters

    def select(self, ids: Sequence[int] | None, tube: str | None, state: str | None) -> list[int]:
        """The job ids a bulk operation acts on: ``ids`` as given, or every job of ``tube`` in
        ``state`` (sorted, taken when the request starts; jobs added later are left alone)."""
        if ids is not None:
            if tube is not None:
                raise BadRequest("give either ids or a tube, not both")
            try:
                return [int(i) for i in ids]
            except (TypeError, ValueError):
                raise BadRequest("ids must be integers") from None
        if tube is None:
            raise BadRequest("give ids, or a tube (and optionally a state)")
        t = self.engine.tubes.get(tube)
        if t is None:
            return []
        return sorted(j.id for j in views.jobs_of(self.engine, t, parse_state(state)))

    # --- mutations ---------------------------------------------------------------------------

    async def delete(self, ids: Sequence[int]) -> dict[str, Any]:
        def one(s: AdminSession, jid: int) -> str:
            j = self.engine.jobs.get(jid)
            if j is None:
                return "not_found"
            if j.state is JobState.RESERVED:
                return "skipped_reserved"
            word = _word(s.run(C.Delete(jid)))
            return "deleted" if word == "DELETED" else word.lower()

        return await self._bulk(ids, one)

    async def kick(self, ids: Sequence[int]) -> dict[str, Any]:
        def one(s: AdminSession, jid: int) -> str:
            j = self.engine.jobs.get(jid)
            if j is None or j.state not in (JobState.BURIED, JobState.DELAYED):
                return "not_found" if j is None else "skipped_" + views.job_row(j, 0)["state"]
            word = _word(s.run(C.KickJob(jid)))
            return "kicked" if word == "KICKED" else word.lower()

        return await self._bulk(ids, one)

    async def move(self, ids: Sequence[int], to: str) -> dict[str, Any]:
        if not to or len(to.encode()) > 200 or any(ch.isspace() for ch in to):
            raise BadRequest(f"bad destination tube name {to!r}")
        moved: dict[int, int] = {}
        now_us = self.now_us()

        def one(s: AdminSession, jid: int) -> str:
            j = self.engine.jobs.get(jid)
            if j is None:
                return "not_found"
            if j.state is JobState.RESERVED:
                return "skipped_reserved"
            if j.tube.name == to:
                return "same_tube"
            delay = max(0, -(-(j.deadline_us - now_us) // US)) if j.state is JobState.DELAYED else 0
            buried = j.state is JobState.BURIED
            pri, ttr, body = j.pri, j.ttr, j.body
            s.run(C.Use(to))
            put = s.run(C.Put(pri, delay, ttr, body))
            if _word(put) != "INSERTED":
                return _word(put).lower()
            new_id = int(put.args[0])  # type: ignore[union-attr]
            if buried:
                s.run(C.ReserveJob(new_id))
                s.run(C.Bury(new_id, pri))
            s.run(C.Delete(jid))
            moved[jid] = new_id
            return "moved"

        out = await self._bulk(ids, one)
        out["new_ids"] = {str(k): v for k, v in moved.items()}
        return out

    async def pause(self, tube: str, seconds: int) -> dict[str, Any]:
        if seconds < 0 or seconds > 2**32 - 1:
            raise BadRequest("seconds must be between 0 and 4294967295")
        async with AdminSession(self.server) as s:
            word = _word(s.run(C.PauseTube(tube, seconds)))
            await s.durable()
        if word == "NOT_FOUND":
            return {"tube": tube, "paused": False, "error": "no such tube"}
        return {"tube": tube, "paused": seconds > 0, "seconds": seconds}

    async def _bulk(self, ids: Sequence[int],
                    one: Callable[[AdminSession, int], str]) -> dict[str, Any]:
        counts: dict[str, int] = {}
        t0 = time.perf_counter()
        async with AdminSession(self.server) as s:
            i = 0
            while i < len(ids) and not self.server.stopping:
                start = time.perf_counter()
                end = min(len(ids), i + CHUNK)
                while i < end:
                    outcome = one(s, ids[i])
                    counts[outcome] = counts.get(outcome, 0) + 1
                    i += 1
                    if time.perf_counter() - start > CHUNK_SECONDS:
                        break
                await s.durable()  # this chunk is on disk; the loop served others meanwhile
                await asyncio.sleep(0)
        return {"requested": len(ids), "outcomes": counts,
                "seconds": round(time.perf_counter() - t0, 4)}


def _word(reply: C.AnyReply) -> str:
    return getattr(reply, "word", type(reply).__name__)
