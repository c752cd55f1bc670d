"""Commands that only read: peek*, stats*, list-* (docs/protocol.md, "Commands").

Ensures: none of these changes a job, tube or connection (``Engine.apply`` counts them in
``cmd``, beanstalkd's per-command counters, from the command table), except that ``stats-job``
of a job whose connection hung up hands it back to ready first (state.py, ``_release_step``).
"""

from __future__ import annotations

from operator import attrgetter

from stalkd.engine import stats as S
from stalkd.engine.jobcommands import JobCommands
from stalkd.engine.objects import ConnState, Job
from stalkd.protocol import commands as C

__all__ = ["Queries"]

_NOT_FOUND = C.Reply("NOT_FOUND")
_name = attrgetter("name")


class Queries(JobCommands):
    """The read-only commands (a layer of ``Engine``, engine.py)."""

    def _found(self, j: Job | None) -> C.AnyReply:
        return _NOT_FOUND if j is None else C.JobReply("FOUND", j.id, j.body)

    def _peek(self, c: ConnState, cmd: C.Peek) -> C.AnyReply:
        return self._found(self.jobs.get(cmd.id))

    def _peek_ready(self, c: ConnState, cmd: C.PeekReady) -> C.AnyReply:
        return self._found(c.use.ready.peek())

    def _peek_delayed(self, c: ConnState, cmd: C.PeekDelayed) -> C.AnyReply:
        return self._found(c.use.delayed.peek())

    def _peek_buried(self, c: ConnState, cmd: C.PeekBuried) -> C.AnyReply:
        b = c.use.buried
        return self._found(next(iter(b.values())) if b else None)

    def _stats_job(self, c: ConnState, cmd: C.StatsJob) -> C.AnyReply:
        j = self.jobs.get(cmd.id)
        if j is None:
            return _NOT_FOUND
        if j.owner is not None and j.owner.release is not None:
            self._release_held(j)  # its owner hung up: it is ready, as the reply says
        return S.stats_job(j, self._now)

    def _stats_tube(self, c: ConnState, cmd: C.StatsTube) -> C.AnyReply:
        t = self.tubes.get(cmd.tube)
        return _NOT_FOUND if t is None else S.stats_tube(t, self._now)

    def _stats(self, c: ConnState, cmd: C.Stats) -> C.AnyReply:
        return S.stats(self)

    def _list_tubes(self, c: ConnState, cmd: C.ListTubes) -> C.AnyReply:
        return C.YamlList(tuple(map(_name, self.tube_order)))  # a C loop: 100k tubes are common

    def _list_tube_used(self, c: ConnState, cmd: C.ListTubeUsed) -> C.AnyReply:
        return C.Reply("USING", (c.use.name,))

    def _list_tubes_watched(self, c: ConnState, cmd: C.ListTubesWatched) -> C.AnyReply:
        return C.YamlList(tuple(t.name for t in c.watch))
