"""Commands that only read: peek*, stats*, list-* (docs/protocol.md, "Commands").

Each handler is a function over the engine's state ``s`` (state.py) and the calling connection,
found by its command's name for ``Engine.apply``'s dispatch (engine.py).

Ensures: none of these changes a job, tube or connection (``Engine.apply`` counts them in
beanstalkd's per-command counters, from the command table), except that ``stats-job`` of a job
whose connection hung up hands it back to ready first (state.py, ``_release_step``).
"""

from __future__ import annotations

from operator import attrgetter

from stalkd.engine import stats as S
from stalkd.engine.objects import ConnState, Job, job_body
from stalkd.engine.state import EngineState
from stalkd.protocol import commands as C

__all__ = ["list_tube_used", "list_tubes", "list_tubes_watched", "peek", "peek_buried", "peek_delayed",
           "peek_ready", "stats", "stats_job", "stats_tube"]

_NOT_FOUND = C.Reply("NOT_FOUND")
_name = attrgetter("name")


def _found(j: Job | None) -> C.AnyReply:
    return _NOT_FOUND if j is None else C.JobReply("FOUND", j.id, job_body(j))


def peek(s: EngineState, c: ConnState, cmd: C.Peek) -> C.AnyReply:
    return _found(s.jobs.get(cmd.id))


def peek_ready(s: EngineState, c: ConnState, cmd: C.PeekReady) -> C.AnyReply:
    return _found(c.use.ready.peek())


def peek_delayed(s: EngineState, c: ConnState, cmd: C.PeekDelayed) -> C.AnyReply:
    return _found(c.use.delayed.peek())


def peek_buried(s: EngineState, c: ConnState, cmd: C.PeekBuried) -> C.AnyReply:
    b = c.use.buried
    return _found(next(iter(b.values())) if b else None)


def stats_job(s: EngineState, c: ConnState, cmd: C.StatsJob) -> C.AnyReply:
    j = s.jobs.get(cmd.id)
    if j is None:
        return _NOT_FOUND
    if j.owner is not None and j.owner.release is not None:
        s._release_held(j)  # its owner hung up: it is ready, as the reply says
    return S.stats_job(j, s._now)


def stats_tube(s: EngineState, c: ConnState, cmd: C.StatsTube) -> C.AnyReply:
    t = s.tubes.get(cmd.tube)
    return _NOT_FOUND if t is None else S.stats_tube(t, s._now)


def stats(s: EngineState, c: ConnState, cmd: C.Stats) -> C.YamlDict:
    """The engine's ``stats`` keys for jobs, tubes and connections (results.py adds its own)."""
    return S.stats(s)


def list_tubes(s: EngineState, c: ConnState, cmd: C.ListTubes) -> C.AnyReply:
    return C.YamlList(tuple(map(_name, s.tube_order)))  # a C loop: 100k tubes are common


def list_tube_used(s: EngineState, c: ConnState, cmd: C.ListTubeUsed) -> C.AnyReply:
    return C.Reply("USING", (c.use.name,))


def list_tubes_watched(s: EngineState, c: ConnState, cmd: C.ListTubesWatched) -> C.AnyReply:
    return C.YamlList(tuple([t.name for t in c.watch]))
