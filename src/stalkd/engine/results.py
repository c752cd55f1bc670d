"""Job results kept by the server for a time-to-live (stalkd's ``result-put`` / ``result-get``).

A result is opaque bytes stored under a job id until an absolute deadline. It outlives its job
(that is its point: a producer asks for it after the worker deleted the job), is durable as one
RESULT record (``model.py``), and is rewritten to the WAL when a snapshot begins so compaction
never drops a live one (``compaction.py``). Expiry needs no record: the deadline is in the
RESULT record, so recovery drops what expired while the server was down.

Ensures: ``result-get`` never shows a result at or after its deadline (checked against the
step's ``now``, whether or not the expiry timer has run); memory of expired results is given
back by ``tick`` and by each ``result-put``; ``result_bytes`` is the sum of live result bodies.

Whose a result is: it belongs to its job's tube for as long as it is kept (``result_tube``, what
the ACL decides on once the job is gone; a result recovered after its job was gone has lost
its tube, ``""``, and is left to admins). Only the connection holding the job may store it, or,
once the job is gone, one holding another job of that tube (a worker finishing a job's copy
stores under the first id). Each owner (``name_owner``: a client certificate's subject, ``""``
for the rest) keeps at most ``ResultLimits.count`` results and ``bytes`` of bodies, for at
most ``ttl`` seconds each; past a limit ``result-put`` is ``RESULT_LIMIT`` and changes nothing.

The results are kept in the engine's state (state.py); the functions here are their rules, and
``result_put``, ``result_get`` and ``stats`` are command handlers, found by name for
``Engine.apply``'s dispatch (engine.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.objects import US, ConnState
from stalkd.engine.queries import stats as _engine_stats
from stalkd.engine.state import EngineState, ResultLimits
from stalkd.protocol import commands as C

__all__ = ["RECOVERED", "ResultLimits", "expire_results", "iter_results", "name_owner", "result_get",
           "result_put", "result_records", "result_tube", "stats", "store_result"]

_NOT_FOUND = C.Reply("NOT_FOUND")
_STORED = C.Reply("STORED")
_LIMIT = C.Reply("RESULT_LIMIT")
RECOVERED = "\x00recovered"  # the owner of results read back at start: nobody's to count
_NO_TUBE = ""  # the tube of a result recovered after its job was gone


def expire_results(s: EngineState, now_us: int) -> int:
    """Forget every result due at or before ``now_us``; how many were forgotten."""
    heap, results = s._result_heap, s.results
    n = 0
    while heap and heap[0][0] <= now_us:
        deadline, jid = heapq.heappop(heap)
        held = results.get(jid)
        if held is not None and held[0] == deadline:
            _forget_result(s, jid)
            n += 1
    return n


def _forget_result(s: EngineState, job_id: int) -> None:
    old = s.results.pop(job_id, None)
    if old is None:
        return
    s.result_bytes -= len(old[1])
    _, owner = s.result_meta.pop(job_id)
    usage = s.result_usage[owner]
    usage[0] -= 1
    usage[1] -= len(old[1])
    if not usage[0]:
        del s.result_usage[owner]


def store_result(s: EngineState, job_id: int, deadline_us: int, body: bytes, *,
                 tube: str | None = None, owner: str = RECOVERED) -> None:
    """Keep ``body`` for ``job_id`` until ``deadline_us`` (0: forget it), as ``owner``'s, in
    ``tube`` (None: the job's, else the earlier result's, else none). Also recovery's."""
    if tube is None:
        job = s.jobs.get(job_id)
        meta = s.result_meta.get(job_id)
        tube = job.tube.name if job is not None else meta[0] if meta is not None else _NO_TUBE
    _forget_result(s, job_id)
    if deadline_us:
        s.results[job_id] = (deadline_us, body)
        s.result_meta[job_id] = (tube, owner)
        usage = s.result_usage.setdefault(owner, [0, 0])
        usage[0] += 1
        usage[1] += len(body)
        s.result_bytes += len(body)
        heapq.heappush(s._result_heap, (deadline_us, job_id))


def name_owner(s: EngineState, conn_id: int, owner: str | None) -> None:
    """Count the results ``conn_id`` stores as ``owner``'s (None: forget the connection)."""
    if owner:
        s._owners[conn_id] = owner
    else:
        s._owners.pop(conn_id, None)


def result_tube(s: EngineState, job_id: int) -> str | None:
    """The tube a kept result belongs to (``""``: lost in a restart); None: no result."""
    meta = s.result_meta.get(job_id)
    return None if meta is None else meta[0]


def result_records(s: EngineState) -> list[Record]:
    """Every live result as a RESULT record with a fresh seq (compaction rewrites them
    after a snapshot's start, so the WAL it keeps still holds them)."""
    out = []
    for jid in sorted(s.results):
        deadline, body = s.results[jid]
        s.seq += 1
        out.append(Record(Op.RESULT, s.seq, s._now, jid, deadline_us=deadline, body=body))
    return out


def iter_results(s: EngineState) -> Iterator[tuple[int, int, bytes]]:
    """(job id, deadline_us, body) of every result held, expired or not."""
    for jid, (deadline, body) in s.results.items():
        yield jid, deadline, body


# --- commands -------------------------------------------------------------------------------------


def result_put(s: EngineState, c: ConnState, cmd: C.ResultPut) -> C.AnyReply:
    if cmd.error is not None:
        return C.Reply(cmd.error)
    if len(cmd.body) > s.max_job_size:
        return C.Reply("JOB_TOO_BIG")
    tube = _held_tube(s, c, cmd.id)
    if tube is None:
        return _NOT_FOUND
    now = s._now
    expire_results(s, now)
    owner = s._owners.get(c.id, "")
    if cmd.ttl:
        limits = s.result_limits
        count, size = s.result_usage.get(owner, (0, 0))
        old = s.results.get(cmd.id)
        if old is not None and s.result_meta[cmd.id][1] == owner:
            count, size = count - 1, size - len(old[1])  # a replacement frees its own room
        if cmd.ttl > limits.ttl or count >= limits.count or size + len(cmd.body) > limits.bytes:
            return _LIMIT
    deadline = now + cmd.ttl * US if cmd.ttl else 0
    store_result(s, cmd.id, deadline, cmd.body, tube=tube, owner=owner)
    s._rec_fields(Op.RESULT, cmd.id, tube="", pri=0, delay=0, ttr=0, deadline_us=deadline, body=cmd.body)
    return _STORED


def _held_tube(s: EngineState, c: ConnState, job_id: int) -> str | None:
    """The tube of ``job_id``'s result if ``c`` may store it (None: NOT_FOUND): ``c`` holds
    the job, or the job is gone, has a result kept, and ``c`` holds a job of its tube."""
    job = s.jobs.get(job_id)
    if job is not None:
        return job.tube.name if job.state is JobState.RESERVED and job.owner is c else None
    meta = s.result_meta.get(job_id)
    if meta is None or job_id not in s.results:
        return None
    return meta[0] if any(j.tube.name == meta[0] for j in c.reserved) else None


def stats(s: EngineState, c: ConnState, cmd: C.Stats) -> C.AnyReply:
    """``stats``: the engine's keys (queries.py) and the results' own."""
    reply = _engine_stats(s, c, cmd)
    limits = s.result_limits
    return C.YamlDict("stats", {**reply.values, "current-results": len(s.results),
                                "result-bytes": s.result_bytes, "max-results": limits.count,
                                "max-result-bytes": limits.bytes, "max-result-ttl": limits.ttl})


def result_get(s: EngineState, c: ConnState, cmd: C.ResultGet) -> C.AnyReply:
    held = s.results.get(cmd.id)
    if held is None or held[0] <= s._now:
        return _NOT_FOUND
    return C.JobReply("FOUND", cmd.id, held[1])
