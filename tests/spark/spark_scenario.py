"""A scripted job history with every wait, run and count known by construction.

The script decides when each job is put, how long it waits, how long it runs and how its
reservation ends, and writes WAL records for that. It also notes the intended figures directly
(``Expected``), so the tests compare the analytics against the script's intent, not against a
second implementation of the same record-walking logic.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field

from stalkd.engine.model import JobState, Op, Record

T0 = 1_700_000_040  # seconds; a multiple of 60, so windows start at T0 + 60 k
US = 1_000_000


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, Spark's ``percentile``)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class Expected:
    waits: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    runs: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # (tube, window index) -> op -> count
    counts: dict[tuple[str, int], dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    first_wait: dict[int, float] = field(default_factory=dict)
    state: dict[int, str] = field(default_factory=dict)
    reserves: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    alive: dict[str, list[tuple[float, float | None]]] = field(default_factory=lambda: defaultdict(list))


class Script:
    def __init__(self) -> None:
        self.events: list[tuple[float, int, Record]] = []
        self.expected = Expected()
        self._n = 0

    def _rec(self, t: float, op: Op, job: int, in_tube: str, **kw: object) -> None:
        self._n += 1
        self.events.append((t, self._n, Record(op, 0, round((T0 + t) * US), job, **kw)))  # type: ignore[arg-type]
        if op is not Op.TOUCH:
            self.expected.counts[(in_tube, int(t // 60))][op.name.lower()] += 1

    def put(self, t: float, job: int, tube: str, delay: int = 0, ttr: int = 60) -> None:
        deadline = round((T0 + t + delay) * US) if delay else 0
        self._rec(t, Op.PUT, job, tube, tube=tube, pri=100, delay=delay, ttr=ttr,
                  deadline_us=deadline, body=b"x" * job)
        self.expected.alive[tube].append((t, None))

    def reserve(self, t: float, job: int, tube: str, wait: float) -> None:
        self._rec(t, Op.RESERVE, job, tube)
        self.expected.waits[tube].append(wait)
        self.expected.first_wait.setdefault(job, wait)
        self.expected.reserves[job] += 1

    def end(self, t: float, job: int, tube: str, op: Op, run: float, **kw: object) -> None:
        self._rec(t, op, job, tube, **kw)
        self.expected.runs[tube].append(run)

    def records(self) -> list[Record]:
        out = []
        for seq, (_, _, r) in enumerate(sorted(self.events, key=lambda e: (e[0], e[1])), 1):
            out.append(dataclasses.replace(r, seq=seq))
        return out


def build() -> Script:
    """Two tubes over about four minutes.

    emails, jobs 1..20: put every 5 s; wait 1..4 s; run 2..4 s; every 5th job is released once
    (ready again at once, re-reserved 1 s later, runs 1 s, deleted); job ids with j % 7 == 3 are
    buried; the rest deleted.
    images, jobs 21..30: put every 3 s with a 10 s delay; reserved 0.5 s after the deadline; the
    first reservation times out after its 5 s TTR; reserved again 2 s later, deleted after 1 s.
    Job 31 (images) is put at the end and never reserved: it stays in the backlog.
    """
    s = Script()
    for i in range(20):
        j = i + 1
        t = i * 5.0
        s.put(t, j, "emails")
        wait, run = float(i % 4 + 1), float(2 + i % 3)
        s.reserve(t + wait, j, "emails", wait)
        t_end = t + wait + run
        s._rec(t + wait + 0.5, Op.TOUCH, j, "emails")
        if j % 5 == 0:
            s.end(t_end, j, "emails", Op.RELEASE, run, pri=100)
            s.reserve(t_end + 1, j, "emails", 1.0)
            s.end(t_end + 2, j, "emails", Op.DELETE, 1.0)
            _close(s, j, "emails", t, t_end + 2)
            s.expected.state[j] = "deleted"
        elif j % 7 == 3:
            s.end(t_end, j, "emails", Op.BURY, run, pri=100)
            s.expected.state[j] = "buried"
        else:
            s.end(t_end, j, "emails", Op.DELETE, run)
            _close(s, j, "emails", t, t_end)
            s.expected.state[j] = "deleted"
    for k in range(10):
        j = 21 + k
        t = k * 3.0
        s.put(t, j, "images", delay=10, ttr=5)
        r1 = t + 10.5
        s.reserve(r1, j, "images", 0.5)
        s.end(r1 + 5, j, "images", Op.TIMEOUT, 5.0)
        s.reserve(r1 + 7, j, "images", 2.0)
        s.end(r1 + 8, j, "images", Op.DELETE, 1.0)
        _close(s, j, "images", t, r1 + 8)
        s.expected.state[j] = "deleted"
    s.put(230.0, 31, "images")
    s.expected.state[31] = "ready"
    return s


def _close(s: Script, job: int, tube: str, put_t: float, t: float) -> None:
    spans = s.expected.alive[tube]
    i = next(i for i, (a, e) in enumerate(spans) if a == put_t and e is None)
    spans[i] = (put_t, t)


def restatement(job: int, tube: str, t: float) -> Record:
    """A compaction ``job`` record restating a live job (must not change any figure)."""
    return Record(Op.JOB, 0, round((T0 + t) * US), job, tube=tube, pri=100, ttr=60,
                  state=JobState.READY, created_us=round(T0 * US))
