"""The engine's share of ``stats``, ``stats-job`` and ``stats-tube`` (docs/protocol.md, "Stats").

Key order here follows beanstalkd's so a reader can check it; the wire order and quoting are
``stalkd.protocol``'s job. The server adds process, binlog and host keys to ``stats``.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from stalkd.engine.model import JobState
from stalkd.engine.objects import US, Job, time_left
from stalkd.protocol.commands import YamlDict
from stalkd.protocol.grammar import REPORTED_COUNTERS

if TYPE_CHECKING:
    from stalkd.engine.objects import Tube
    from stalkd.engine.state import EngineState

__all__ = ["stats", "stats_job", "stats_tube", "totals", "TOTALS", "TOTALS_AT_ONCE"]

_STATE_NAMES = {
    JobState.READY: "ready",
    JobState.RESERVED: "reserved",
    JobState.BURIED: "buried",
    JobState.DELAYED: "delayed",
}


def stats_job(j: Job, now_us: int) -> YamlDict:
    """``stats-job`` values for one job at ``now_us``.

    >>> from stalkd.engine.objects import Tube
    >>> j = Job(3, Tube("t", 1), 5, 0, 60, b"x", JobState.READY, 0)
    >>> stats_job(j, 2_500_000).values["age"]
    2
    """
    timed = j.state is JobState.RESERVED or j.state is JobState.DELAYED
    return YamlDict(
        "stats-job",
        {
            "id": j.id,
            "tube": j.tube.name,
            "state": _STATE_NAMES[j.state],
            "pri": j.pri,
            "age": (now_us - j.created_us) // US if now_us >= j.created_us else 0,
            "delay": j.delay,
            "ttr": j.ttr,
            "time-left": time_left(j.deadline_us, now_us) if timed else 0,
            "file": 0,
            "reserves": j.reserves,
            "timeouts": j.timeouts,
            "releases": j.releases,
            "buries": j.buries,
            "kicks": j.kicks,
        },
    )


def stats_tube(t: Tube, now_us: int) -> YamlDict:
    """``stats-tube`` values for one tube at ``now_us``."""
    paused = t.is_paused(now_us)
    return YamlDict(
        "stats-tube",
        {
            "name": t.name,
            "current-jobs-urgent": t.urgent,
            "current-jobs-ready": len(t.ready),
            "current-jobs-reserved": t.reserved,
            "current-jobs-delayed": len(t.delayed),
            "current-jobs-buried": len(t.buried),
            "total-jobs": t.total_jobs,
            "current-using": t.using,
            "current-watching": t.watching,
            "current-waiting": len(t.waiting),
            "cmd-delete": t.cmd_delete,
            "cmd-pause-tube": t.cmd_pause,
            "pause": t.pause_secs if paused else 0,
            "pause-time-left": time_left(t.pause_until_us, now_us) if paused else 0,
        },
    )


_urgent, _reserved, _buried = attrgetter("urgent"), attrgetter("reserved"), attrgetter("buried")
_ready, _delayed = attrgetter("ready"), attrgetter("delayed")
_producer, _worker, _waiting = attrgetter("producer"), attrgetter("worker"), attrgetter("waiting")


TOTALS = ("current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
          "current-jobs-delayed", "current-jobs-buried")
"""The job totals of ``stats``: sums over every tube, its first keys."""

TOTALS_AT_ONCE = 10_000
"""Above this many tubes ``stats`` leaves ``TOTALS`` out, for the server to count a slice of the
tubes per loop turn and put in (server/stattotals.py): one pass over 100k tubes held the loop
25-55 ms of CPU."""


def totals(tubes: Sequence[Tube]) -> list[int]:
    """``TOTALS`` over ``tubes``, in that order."""
    # Each one C loop (map/attrgetter/len, no Python frame per tube): ~8x cheaper than
    # generator sums.
    return [sum(map(_urgent, tubes)), sum(map(len, map(_ready, tubes))), sum(map(_reserved, tubes)),
            sum(map(len, map(_delayed, tubes))), sum(map(len, map(_buried, tubes)))]


def stats(e: EngineState) -> YamlDict:
    """The engine-owned ``stats`` keys; without ``TOTALS`` past ``TOTALS_AT_ONCE`` tubes."""
    tubes = e.tube_order
    conns = e.conns.values()
    values: dict[str, int | float | bool | str] = (
        dict(zip(TOTALS, totals(tubes), strict=True)) if len(tubes) <= TOTALS_AT_ONCE else {})
    counts = e.command_counts()
    for k in REPORTED_COUNTERS:
        values[k] = counts[k]
    values.update(
        {
            "job-timeouts": e.job_timeouts,
            "total-jobs": e.total_jobs,
            "max-job-size": e.max_job_size,
            "current-tubes": len(tubes),
            "current-connections": len(e.conns) - e.internal_conns,
            "current-producers": sum(map(_producer, conns)),
            "current-workers": sum(map(_worker, conns)),
            "current-waiting": sum(map(_waiting, conns)),
            "total-connections": e.total_connections,
            "draining": e.draining,
        }
    )
    return YamlDict("stats", values)
