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
batch. A dead-lettered job's record in the failed tube is put again under its new id and tube. The job keeps its state: a delayed job keeps its remaining delay, a buried one is
reserved and buried again in its new tube. Reserved jobs are never touched by bulk operations
(a worker holds them); they are reported as skipped.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from stalkd.admin import views
from stalkd.admin.session import AdminSession
from stalkd.admin.tubepage import SLICE, SORTS, TubePage
from stalkd.engine.model import JobState
from stalkd.engine.objects import US
from stalkd.protocol import commands as C
from stalkd.tubes import FAILED_TUBE, is_internal

if TYPE_CHECKING:
    from stalkd.server.app import Server

__all__ = ["AdminOps", "BadRequest", "CHUNK", "FAILED_TUBE", "answer_parts", "encode_answer"]

CHUNK = 512  # jobs per chunk of a bulk operation
CHUNK_SECONDS = 0.002  # loop time per chunk before yielding to other clients
MAX_PAGE = 1000
OVERVIEW_PAGE = 500  # tubes per overview page unless asked
MAX_OVERVIEW_PAGE = 5000  # ~10 ms of loop time to build
IDS_PER_SLICE = 20_000  # new ids encoded per loop turn in a move's answer
FIFO_STEP = 2048  # buried ids read per slice
PARSE_BUDGET = 2000  # dead-letter records parsed per call (~10 ms of loop time at most)


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
        # failed-tube record id -> (original job id, record), or None for a foreign job
        self._parsed: dict[int, tuple[int, dict[str, Any]] | None] = {}

    def now_us(self) -> int:
        return round(self.server.clock() * US)

    # --- reads -------------------------------------------------------------------------------

    async def overview(self, offset: int = 0, limit: int = OVERVIEW_PAGE, *, sort: str = "created",
                       q: str = "", internal: bool = True) -> dict[str, Any]:
        """Server counts and a page of the tubes: ``limit`` (at most ``MAX_OVERVIEW_PAGE``)
        from ``offset`` of those whose name contains ``q`` (stalkd's own only when
        ``internal``), in the order ``sort`` (``tubepage.SORTS``); ``next`` is the next page's
        offset, None on the last; ``totals`` sums every tube's figures, stalkd's own apart.
        The tubes are read ``tubepage.SLICE`` at a time with the loop served in between."""
        if sort not in SORTS:
            raise BadRequest(f"unknown sort {sort!r} ({', '.join(SORTS)})")
        limit = max(1, min(limit, MAX_OVERVIEW_PAGE))
        offset = max(0, offset)
        chooser = TubePage(self.engine.tube_order, sort=sort, q=q, internal=internal,
                           offset=offset, limit=limit)
        while not chooser.step():
            await asyncio.sleep(0)
        now = self.now_us()
        server = {**views.server_row(self.engine), "id": self.server.host_id,
                  "addresses": list(self.server.addresses)}
        total = chooser.matched
        return {"server": server, "totals": chooser.totals,
                "tubes": [views.tube_row(t, now) for t in chooser.page()],
                "tubes_total": total, "offset": offset, "sort": sort, "q": q,
                "next": offset + limit if offset + limit < total else None}

    def tube(self, name: str) -> dict[str, Any] | None:
        t = self.engine.tubes.get(name)
        return None if t is None else views.tube_row(t, self.now_us())

    async def jobs(self, tube: str, state: str | None, after: int = 0,
                   limit: int = 100) -> dict[str, Any]:
        """A page of the jobs of ``tube`` in ``state``: the ``limit`` smallest ids above ``after``
        and the cursor of the next page (None on the last)."""
        st = parse_state(state)
        limit = max(1, min(limit, MAX_PAGE))
        ids = await self.select(None, tube, state)
        best: list[int] = []
        step = CHUNK * 16
        for i in range(0, len(ids), step):
            if i:
                await asyncio.sleep(0)
            best = views.smallest_above(ids[i:i + step], after, limit + 1, best)
        cursor = best[limit - 1] if len(best) > limit else None
        now = self.now_us()
        letters = self.dead_letters() if st in (None, JobState.BURIED) else {}
        rows = []
        for jid in best[:limit]:
            j = self.engine.jobs.get(jid)
            if j is None:
                continue  # deleted while the page was being read
            row = views.job_row(j, now)
            letter = letters.get(j.id)
            if letter is not None:
                row["error"] = letter["error"]
                row["attempts"] = letter["attempts"]
            rows.append(row)
        return {"tube": tube, "state": state or "all", "jobs": rows, "next": cursor}

    async def _tubes_where(self, keep: Callable[[Any], Any]) -> AsyncIterator[Any]:
        """The tubes, in creation order, for which ``keep`` is true: the list is read
        ``tubepage.SLICE`` tubes at a time with the loop served in between (one pass over
        100k tubes is tens of ms)."""
        tubes = list(self.engine.tube_order)  # a C copy: the engine's may change meanwhile
        for i in range(0, len(tubes), SLICE):
            if i:
                await asyncio.sleep(0)
            for t in [t for t in tubes[i:i + SLICE] if keep(t)]:
                yield t

    async def workers(self) -> list[dict[str, Any]]:
        """The live worker processes (``stalkd workers``): each one's newest record, from
        the presence tubes some connection still watches (a dead worker's watch is gone)."""
        from stalkd.worker.presence import PRESENCE_PREFIX, describe

        now = self.server.clock()
        out = []
        async for t in self._tubes_where(lambda t: t.watching and t.name.startswith(PRESENCE_PREFIX)):
            records = sorted(t.delayed, key=lambda j: j.id)
            got = describe(records[-1].body, now) if records else None
            if got is not None:
                out.append(got)
        return sorted(out, key=lambda r: (str(r.get("host")), int(r.get("pid", 0))))

    async def oldest_buried(self, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` buried jobs, oldest first per tube, with their dead-letter errors.
        Reads only the jobs it returns (the buried FIFO's head), so a dashboard polling it
        every second costs the same with 10 or 100k buried jobs; the tubes are read a slice
        per loop turn."""
        now = self.now_us()
        letters = self.dead_letters()
        rows: list[dict[str, Any]] = []
        async for t in self._tubes_where(lambda t: t.buried):
            if len(rows) >= limit:
                break
            internal = is_internal(t.name)
            for j in itertools.islice(t.buried.values(), limit - len(rows)):
                row = views.job_row(j, now)
                row["internal"] = internal  # the dashboard hides stalkd's own unless asked
                letter = letters.get(j.id)
                if letter is not None:
                    row["error"], row["attempts"] = letter["error"], letter["attempts"]
                rows.append(row)
        return rows

    def job(self, job_id: int) -> dict[str, Any] | None:
        j = self.engine.jobs.get(job_id)
        if j is None:
            return None
        row = views.job_row(j, self.now_us(), preview=64 * 1024)
        row["dead_letter"] = self.dead_letters().get(job_id)
        return row

    def dead_letters(self) -> dict[int, dict[str, Any]]:
        """Original job id -> its newest dead-letter record in the failed tube.

        Records are parsed once each (kept by record id) and at most ``PARSE_BUDGET`` per
        call, so a dashboard polling every second while workers keep failing never holds the
        loop for a parse of the whole tube; the map is rebuilt only when the tube changed."""
        t = self.engine.tubes.get(self.failed_tube)
        if t is None:
            return {}
        key = (t.total_jobs, t.cmd_delete)
        if key == self._letters[0]:
            return self._letters[1]
        from stalkd.worker.actions import DeadLetter

        parsed, budget, complete = self._parsed, PARSE_BUDGET, True
        live: dict[int, tuple[int, dict[str, Any]] | None] = {}
        for j in views.jobs_of(self.engine, t, None):
            got: tuple[int, dict[str, Any]] | None
            if j.id in parsed:
                got = parsed[j.id]
            else:
                if budget <= 0:
                    complete = False
                    continue
                budget -= 1
                try:
                    rec = DeadLetter.from_json(j.body)
                    got = (rec.job_id, {
                        "record_id": j.id, "tube": rec.tube, "task": rec.task,
                        "attempts": rec.attempts, "error": rec.error, "traceback": rec.traceback,
                        "failed_at": rec.failed_at,
                    })  # fmt: skip
                except (ValueError, KeyError, TypeError):
                    got = None  # a foreign job in the failed tube
            live[j.id] = got
        self._parsed = live  # records gone from the tube are forgotten
        letters: dict[int, dict[str, Any]] = {}
        for rid in sorted(k for k, v in live.items() if v is not None):
            jid, letter = live[rid]  # type: ignore[misc]
            letters[jid] = letter  # ascending record ids: the newest per job wins
        self._letters = (key if complete else (-1, -1), letters)
        return letters

    async def select(self, ids: Sequence[int] | None, tube: str | None,
                     state: str | None) -> list[int]:
        """The job ids a bulk operation acts on: ``ids`` as given, or every job of ``tube`` in
        ``state`` as they are when the request starts (jobs added later are left alone), in
        container order (buried: oldest first). The containers are copied in C, then read
        ``CHUNK * 16`` jobs at a time with the loop served in between: 100k jobs read in one
        go held the loop ~65 ms."""
        if ids is not None:
            if tube is not None:
                raise BadRequest("give either ids or a tube, not both")
            try:
                return [int(i) for i in ids]
            except (TypeError, ValueError):
                raise BadRequest("ids must be integers") from None
        if tube is None:
            raise BadRequest("give ids, or a tube (and optionally a state)")
        st = parse_state(state)
        t = self.engine.tubes.get(tube)
        if t is None:
            return []
        buried = await self._buried_ids(t) if st in (None, JobState.BURIED) else []
        # each heap copied by its C item_list (a presized list: ~4x cheaper than extending
        # a list from the heap's iterator, which held the loop ~40 ms at 900k jobs)
        parts: list[list[Any]] = []
        if st in (None, JobState.READY):
            parts.append(t.ready.item_list())
        if st in (None, JobState.DELAYED):
            parts.append(t.delayed.item_list())
        if st in (None, JobState.RESERVED):
            parts.append(list(views.jobs_of(self.engine, t, JobState.RESERVED)))
        # read from their ends, each slice let go once read (a copy freed whole is one step
        # of a reference per job), then turned round into container order
        out: list[int] = []
        step = CHUNK * 16
        for jobs in reversed(parts):
            while jobs:
                await asyncio.sleep(0)
                out.extend([j.id for j in reversed(jobs[-step:])])
                del jobs[-step:]
        out.extend(reversed(buried))
        out.reverse()
        return out

    async def _buried_ids(self, t: Any) -> list[int]:
        """The ids in ``t``'s buried FIFO, oldest first, read ``FIFO_STEP`` at a time. An
        OrderedDict walks ~10x slower than a dict (100k keys in one go held the loop 130-160 ms
        under load), hence the slices; if it changes between two slices, the engine's job table
        (one C copy of a plain dict) is filtered in slices instead."""
        out: list[int] = []
        it = iter(t.buried)
        try:
            while True:
                chunk = list(itertools.islice(it, FIFO_STEP))
                out.extend(chunk)
                if len(chunk) < FIFO_STEP:
                    return out
                await asyncio.sleep(0)
        except RuntimeError:  # "OrderedDict mutated during iteration"
            pass
        jobs = self.engine.jobs
        ids = list(jobs)
        out = []
        step = CHUNK * 16
        for i in range(0, len(ids), step):
            if i:
                await asyncio.sleep(0)
            for jid in ids[i:i + step]:
                j = jobs.get(jid)
                if j is not None and j.tube is t and j.state is JobState.BURIED:
                    out.append(jid)
        return out

    # --- mutations ---------------------------------------------------------------------------

    async def delete(self, ids: list[int]) -> dict[str, Any]:
        def one(s: AdminSession, jid: int) -> str:
            j = self.engine.jobs.get(jid)
            if j is None:
                return "not_found"
            if j.state is JobState.RESERVED:
                return "skipped_reserved"
            word = _word(s.run(C.Delete(jid)))
            return "deleted" if word == "DELETED" else word.lower()

        return await self._bulk(ids, one)

    async def kick(self, ids: list[int]) -> dict[str, Any]:
        def one(s: AdminSession, jid: int) -> str:
            j = self.engine.jobs.get(jid)
            if j is None or j.state not in (JobState.BURIED, JobState.DELAYED):
                return "not_found" if j is None else "skipped_" + views.job_row(j, 0)["state"]
            word = _word(s.run(C.KickJob(jid)))
            return "kicked" if word == "KICKED" else word.lower()

        return await self._bulk(ids, one)

    async def move(self, ids: list[int], to: str) -> dict[str, Any]:
        if not to or len(to.encode()) > 200 or any(ch.isspace() for ch in to):
            raise BadRequest(f"bad destination tube name {to!r}")
        old_ids: list[int] = []  # and their new ids, in the order moved (see answer_parts)
        new_ids: list[int] = []
        now_us = self.now_us()
        letters = self.dead_letters()

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
                letter = letters.get(jid)
                if letter is not None:
                    self._repoint_letter(s, int(letter["record_id"]), new_id, to)
            s.run(C.Delete(jid))
            old_ids.append(jid)
            new_ids.append(new_id)
            return "moved"

        out = await self._bulk(ids, one)
        out["new_ids"] = (old_ids, new_ids)  # encoded (and let go) a slice at a time by ``answer_parts``
        return out

    def _repoint_letter(self, s: AdminSession, record_id: int, new_id: int, tube: str) -> None:
        """A moved dead-lettered job keeps its record (error, traceback, attempts): put again
        naming its new id and tube, the old one deleted."""
        from dataclasses import replace

        from stalkd.worker.actions import DeadLetter

        rec = self.engine.jobs.get(record_id)
        if rec is None:
            return
        try:
            letter = DeadLetter.from_json(rec.body)
        except (ValueError, KeyError, TypeError):
            return
        s.run(C.Use(self.failed_tube))
        s.run(C.Put(rec.pri, 0, rec.ttr, replace(letter, job_id=new_id, tube=tube).to_json()))
        s.run(C.Delete(record_id))

    async def pause(self, tube: str, seconds: int) -> dict[str, Any]:
        if seconds < 0 or seconds > 2**32 - 1:
            raise BadRequest("seconds must be between 0 and 4294967295")
        async with AdminSession(self.server) as s:
            word = _word(s.run(C.PauseTube(tube, seconds)))
            await s.durable()
        if word == "NOT_FOUND":
            return {"tube": tube, "paused": False, "error": "no such tube"}
        return {"tube": tube, "paused": seconds > 0, "seconds": seconds}

    async def _bulk(self, ids: list[int],
                    one: Callable[[AdminSession, int], str]) -> dict[str, Any]:
        """``one`` for each of ``ids`` in order, a chunk per loop turn. ``ids`` is used up: it is
        reversed, then popped, so each id is let go as its job is done. Kept to the end, a
        large selection was freed in one step as the call returned, together with the memory
        of the jobs it had deleted (their ids kept pymalloc's arenas alive): the longest step
        of a large delete."""
        counts: dict[str, int] = {}
        requested = len(ids)
        t0 = time.perf_counter()
        ids.reverse()
        pop = ids.pop
        async with AdminSession(self.server) as s:
            while ids and not self.server.stopping:
                start = time.perf_counter()
                for _ in range(min(CHUNK, len(ids))):
                    outcome = one(s, pop())
                    counts[outcome] = counts.get(outcome, 0) + 1
                    if time.perf_counter() - start > CHUNK_SECONDS:
                        break
                await s.durable()  # this chunk is on disk; the loop served others meanwhile
                await asyncio.sleep(0)
        return {"requested": requested, "outcomes": counts,
                "seconds": round(time.perf_counter() - t0, 4)}


async def answer_parts(out: dict[str, Any]) -> AsyncIterator[bytes]:
    """``out`` as JSON, in parts to write one after another. A move's ``new_ids`` (two lists,
    a million ids each after a large move: the old ids and their new ids, in the order moved)
    becomes the map ``{"old": new, ...}``, ``IDS_PER_SLICE`` pairs a part with the loop served
    before each, and the lists are used up: reversed once, then read from their ends, each
    slice let go once encoded. The whole map at once held the loop ~1.5 s; a million ids let go
    at once were a large move's longest step; the answer joined whole (14.6 MB for 900k ids),
    then encoded and handed to the transport, was three copies into fresh pages in one turn
    (41 ms of CPU at the end of the bench's move). (Two lists, not a dict: a dict of a million
    entries rehashes them all in one step as it grows.)

    >>> async def whole(out): return [p async for p in answer_parts(out)]
    >>> asyncio.run(whole({"requested": 2, "new_ids": ([7, 3], [10, 11])}))
    [b'{"requested":2,"new_ids":{', b'"7":10,"3":11', b'}}']
    """
    moved: tuple[list[int], list[int]] | None = out.get("new_ids")
    if moved is None:
        yield json.dumps(out, separators=(",", ":")).encode()
        return
    old, new = moved
    head = json.dumps({k: v for k, v in out.items() if k != "new_ids"}, separators=(",", ":"))
    yield (head[:-1] + ',"new_ids":{').encode()
    old.reverse()
    new.reverse()
    sep = ""
    while old:
        await asyncio.sleep(0)
        k = min(IDS_PER_SLICE, len(old))
        pairs = ",".join(map('"{}":{}'.format, reversed(old[-k:]), reversed(new[-k:])))
        del old[-k:], new[-k:]
        yield (sep + pairs).encode()
        sep = ","
    yield b"}}"


async def encode_answer(out: dict[str, Any]) -> str:
    """``out`` as JSON in one string: ``answer_parts`` joined (the endpoint writes the parts
    as they come).

    >>> asyncio.run(encode_answer({"requested": 2, "new_ids": ([7, 3], [10, 11])}))
    '{"requested":2,"new_ids":{"7":10,"3":11}}'
    """
    return b"".join([p async for p in answer_parts(out)]).decode()


def _word(reply: C.AnyReply) -> str:
    return getattr(reply, "word", type(reply).__name__)
