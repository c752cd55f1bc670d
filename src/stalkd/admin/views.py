"""Read-only views of the engine for the admin endpoint: tube rows, job rows, pages of jobs.

Pure functions of an engine and ``now_us``: no socket, clock or file. They read the engine's
containers (a tube's ready/delay heaps and buried FIFO, connections' reserved heaps) and change
nothing, not even the engine's command counters (an operator looking is not a client command).

Paging is by job id: a page holds the ``limit`` smallest ids above ``after``, so a client can
walk a tube while it changes without seeing a job twice. ``AdminOps.jobs`` feeds
``smallest_above`` the ids of a state a slice at a time, serving the loop in between (one pass
over 100k buried jobs as Job objects held the loop ~200 ms); pollers such as the dashboard use
the buried FIFO's head instead (``AdminOps.oldest_buried``), which costs only what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from stalkd.engine import Engine
from stalkd.engine.model import JobState
from stalkd.engine.objects import US, Job, Tube, time_left
from stalkd.tubes import is_internal

__all__ = ["STATES", "tube_row", "job_row", "jobs_of", "smallest_above", "server_row"]

# The job states by their API names (the names stats-job uses).
STATES: dict[str, JobState] = {
    "ready": JobState.READY, "reserved": JobState.RESERVED,
    "delayed": JobState.DELAYED, "buried": JobState.BURIED,
}  # fmt: skip
_NAMES = {v: k for k, v in STATES.items()}
PREVIEW_BYTES = 64  # the first bytes of a body shown in a listing


def tube_row(t: Tube, now_us: int) -> dict[str, Any]:
    """One tube's counts, as the dashboard and ``stalkd tubes`` show them."""
    paused = t.is_paused(now_us)
    return {
        "name": t.name, "internal": is_internal(t.name),
        "ready": len(t.ready), "reserved": t.reserved, "delayed": len(t.delayed),
        "buried": len(t.buried), "urgent": t.urgent, "waiting": len(t.waiting),
        "using": t.using, "watching": t.watching, "total_jobs": t.total_jobs,
        "deletes": t.cmd_delete, "paused": paused,
        "pause_left": time_left(t.pause_until_us, now_us) if paused else 0,
    }  # fmt: skip


def server_row(engine: Engine) -> dict[str, Any]:
    """Whole-server job and connection counts (beanstalkd's ``stats`` subset the dashboard uses)."""
    conns = engine.conns.values()
    return {
        "jobs": len(engine.jobs), "body_bytes": engine.body_bytes,
        "total_jobs": engine.total_jobs, "tubes": len(engine.tube_order),
        "connections": len(engine.conns) - engine.internal_conns, "total_connections": engine.total_connections,
        "producers": sum(1 for c in conns if c.producer),
        "workers": sum(1 for c in conns if c.worker),
        "waiting": sum(1 for c in conns if c.waiting),
        "timeouts": engine.job_timeouts, "draining": engine.draining,
    }  # fmt: skip


def job_row(j: Job, now_us: int, preview: int = PREVIEW_BYTES) -> dict[str, Any]:
    """One job: its counters and the first ``preview`` bytes of its body (as text when it
    decodes as UTF-8, else with replacement characters; ``size`` is the full length)."""
    timed = j.state is JobState.RESERVED or j.state is JobState.DELAYED
    return {
        "id": j.id, "tube": j.tube.name, "state": _NAMES[j.state], "pri": j.pri,
        "age": max(0, (now_us - j.created_us) // US), "delay": j.delay, "ttr": j.ttr,
        "time_left": time_left(j.deadline_us, now_us) if timed else 0,
        "reserves": j.reserves, "timeouts": j.timeouts, "releases": j.releases,
        "buries": j.buries, "kicks": j.kicks, "size": len(j.body),
        "body": j.body[:preview].decode("utf-8", "replace"),
        "truncated": len(j.body) > preview,
    }  # fmt: skip


def jobs_of(engine: Engine, tube: Tube, state: JobState | None) -> Iterator[Job]:
    """The jobs of ``tube`` in ``state`` (every state when None), in no particular order."""
    parts: list[Iterable[Job]] = []
    if state in (None, JobState.READY):
        parts.append(tube.ready)
    if state in (None, JobState.DELAYED):
        parts.append(tube.delayed)
    if state in (None, JobState.BURIED):
        parts.append(tube.buried.values())
    for part in parts:
        yield from part
    if state in (None, JobState.RESERVED) and tube.reserved:
        for c in engine.holders():
            for j in c.reserved:
                if j.tube is tube:
                    yield j


def smallest_above(ids: Iterable[int], after: int, n: int, best: Sequence[int] = ()) -> list[int]:
    """The ``n`` smallest ids above ``after`` among ``ids`` and ``best`` (a previous result):
    fed slice by slice, it pages through a large state without one long pass.

    >>> smallest_above([9, 3, 7, 5], 3, 2), smallest_above([4, 8], 3, 2, [5, 7])
    ([5, 7], [4, 5])
    """
    # a C sort of a slice beats heapq.nsmallest's Python loop ~10x on a few thousand ints
    merged = [i for i in ids if i > after]
    merged.extend(best)
    merged.sort()
    return merged[:n]
