"""Commands that only read: peek*, stats*, list-* (PROTOCOL.md §5, §6).

Ensures: none of these changes a job, tube or connection; each counts itself in ``cmd``
(beanstalkd's per-command counters), which is all they write.
"""

from __future__ import annotations

from stalkd.engine import commands as C
from stalkd.engine import stats as S
from stalkd.engine.conn import Conn
from stalkd.engine.job import Job
from stalkd.engine.state import EngineState

__all__ = ["Queries"]

_NOT_FOUND = C.Reply("NOT_FOUND")


class Queries(EngineState):
    """The read-only commands (mixed into ``Engine``)."""

    def _found(self, j: Job | None) -> C.AnyReply:
        return _NOT_FOUND if j is None else C.JobReply("FOUND", j.id, j.body)

    def _peek(self, c: Conn, cmd: C.Peek) -> C.AnyReply:
        self.cmd["cmd-peek"] += 1
        return self._found(self.jobs.get(cmd.id))

    def _peek_ready(self, c: Conn, cmd: C.PeekReady) -> C.AnyReply:
        self.cmd["cmd-peek-ready"] += 1
        return self._found(c.use.ready.peek())

    def _peek_delayed(self, c: Conn, cmd: C.PeekDelayed) -> C.AnyReply:
        self.cmd["cmd-peek-delayed"] += 1
        return self._found(c.use.delayed.peek())

    def _peek_buried(self, c: Conn, cmd: C.PeekBuried) -> C.AnyReply:
        self.cmd["cmd-peek-buried"] += 1
        b = c.use.buried
        return self._found(next(iter(b.values())) if b else None)

    def _stats_job(self, c: Conn, cmd: C.StatsJob) -> C.AnyReply:
        self.cmd["cmd-stats-job"] += 1
        j = self.jobs.get(cmd.id)
        return _NOT_FOUND if j is None else S.stats_job(j, self._now)

    def _stats_tube(self, c: Conn, cmd: C.StatsTube) -> C.AnyReply:
        self.cmd["cmd-stats-tube"] += 1
        t = self.tubes.get(cmd.tube)
        return _NOT_FOUND if t is None else S.stats_tube(t, self._now)

    def _stats(self, c: Conn, cmd: C.Stats) -> C.AnyReply:
        self.cmd["cmd-stats"] += 1
        return S.stats(self)

    def _list_tubes(self, c: Conn, cmd: C.ListTubes) -> C.AnyReply:
        self.cmd["cmd-list-tubes"] += 1
        return C.YamlList(tuple(t.name for t in self.tube_order))

    def _list_tube_used(self, c: Conn, cmd: C.ListTubeUsed) -> C.AnyReply:
        self.cmd["cmd-list-tube-used"] += 1
        return C.Reply("USING", (c.use.name,))

    def _list_tubes_watched(self, c: Conn, cmd: C.ListTubesWatched) -> C.AnyReply:
        self.cmd["cmd-list-tubes-watched"] += 1
        return C.YamlList(tuple(t.name for t in c.watch))
