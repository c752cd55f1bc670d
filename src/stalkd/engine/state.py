"""The engine's state and the moves between its containers (beanstalkd's ``tube.c``/``job.c``).

``EngineState`` holds jobs, tubes, connections, counters, stored results, the two timer heaps
and the per-step scratch; its methods move a job between containers (ready heap, delay heap,
buried FIFO, a connection's reserved heap), create and free tubes, and keep the timer heaps in
step with them. ``Engine`` (engine.py) holds one; the rules are functions over it, one module
each: the step frame and timers (``timers.py``), the commands that change a job
(``jobcommands.py``), read-only commands (``queries.py``), stored results (``results.py``).
Its names with a leading underscore are the engine package's own (the step's scratch and the
container moves those modules share), not the server's.

Ensures, after each method: a job's ``state`` names the one container holding it (job.py); a
tube or connection is in its timer heap exactly when it has a timer, keyed by that instant
(also kept in its ``timer_at``; ``_retime_tube``/``_retime_conn`` are called after every change
that can move one); a tube with waiters that gained a ready job is in ``_dirty`` (to be
served before the step ends);
a tube is freed exactly when beanstalkd would (no jobs, users or watchers; never ``default``);
a connection that hangs up leaves ``conns`` at once, and its reserved jobs go back to ready, then
the tubes it watched are let go, at most a step's budget at a time, jobs most urgent first
(``_release_step``; a command that names one of its jobs hands it back first, so it is never
NOT_FOUND for being held by nobody).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterator, Mapping
from heapq import heappop, heappush
from typing import TYPE_CHECKING

from stalkd.engine.heap import IndexedHeap, pack
from stalkd.engine.jobtable import JobTable
from stalkd.engine.model import JobState, Op, Record, new_record
from stalkd.engine.objects import (
    URGENT_THRESHOLD,
    US,
    ConnState,
    Job,
    Release,
    Tube,
    remove_swap_last,
)
from stalkd.engine.room import Room
from stalkd.protocol import commands as C
from stalkd.protocol.grammar import COUNTERS
from stalkd.values import Value

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["EngineError", "EngineState", "Outcome", "ResultLimits", "STEP_JOBS", "counter_slot"]

STEP_JOBS = 256
"""Jobs one engine step may move in bulk (delays and TTRs expiring, a kick): work that grows
with the number of jobs goes on in later steps, so no step holds the event loop for long.
A count, not a clock: the engine stays pure (a delayed kick costs tens of microseconds)."""
KEYS_PER_JOB = 16
"""Ready keys collected (``Release``) for the cost of moving one job: one heap push in C."""
_ID_MASK = (1 << 64) - 1

READY, RESERVED, BURIED, DELAYED = JobState.READY, JobState.RESERVED, JobState.BURIED, JobState.DELAYED
_OP_RESERVE = Op.RESERVE


class EngineError(ValueError):
    """The caller broke the engine's contract (unknown connection, command while waiting, ...)."""


_COUNTER_SLOTS = {k: i for i, k in enumerate(COUNTERS)}


def counter_slot(key: str) -> int:
    """Where the counter ``key`` (a ``COUNTERS`` key) is kept in an engine's counts.

    >>> counter_slot("cmd-put")
    0
    """
    return _COUNTER_SLOTS[key]


class ResultLimits(Value):
    """What one owner may keep (``--max-results``, ``--max-result-bytes``, ``--max-result-ttl``;
    the rules are results.py's)."""

    __slots__ = ("count", "bytes", "ttl")

    def __init__(self, count: int = 100_000, bytes: int = 64 * 2**20, ttl: int = 30 * 86_400) -> None:
        self.count = count
        self.bytes = bytes
        self.ttl = ttl


@cython.freelist(8)  # one is built per step: compiled, those let go are reused
@cython.no_gc  # it holds replies and records, never itself: no cycle to collect
@cython.cclass
class Outcome:
    """What one engine step produced, built by the step frame alone (``timers.finish_step``) and
    read by the caller: treat it as immutable (compiled, an extension type whose fields Python
    code can read but not set).

    ``reply`` is for the calling connection (None: it is now blocked in reserve); ``wakeups``
    are replies for other connections that were waiting; ``records`` must be durable (their
    DURABLE_OPS ones) before any of these replies is sent.
    """

    __slots__ = ("reply", "records", "wakeups", "next_deadline")

    reply: C.AnyReply | None
    records: tuple[Record, ...]
    wakeups: tuple[tuple[int, C.AnyReply], ...]
    next_deadline: float | None

    def __repr__(self) -> str:
        return (f"Outcome(reply={self.reply!r}, records={self.records!r}, wakeups={self.wakeups!r}, "
                f"next_deadline={self.next_deadline!r})")


class EngineState:
    """Jobs, tubes, connections and timers, with the container moves every command shares."""

    # Every field is a slot (compiled: a C field, state.pxd), and the class is final, so the
    # container moves below are direct C calls from the rule modules.
    __slots__ = (
        "max_job_size", "step_jobs", "keep_records", "jobs", "tubes", "tube_order", "conns", "next_id", "seq",
        "draining", "_counts", "job_timeouts", "total_jobs", "total_connections", "internal_conns", "body_bytes",
        "epochs", "_tube_serial", "_wait_serial", "_pending", "_tube_timers", "_conn_timers", "_budget", "_now",
        "_clock", "_records", "_wakeups", "_dirty", "_caller", "_own", "_room", "results", "result_bytes",
        "_result_heap", "result_limits", "result_meta", "result_usage", "_owners", "__weakref__",
    )  # fmt: skip

    def __init__(self, max_job_size: int = 65535, records: bool = True, step_jobs: int = STEP_JOBS) -> None:
        if step_jobs < 1:
            raise ValueError(f"step_jobs must be >= 1, got {step_jobs}")
        self.max_job_size = max_job_size
        self.step_jobs = step_jobs
        self.keep_records = records
        self.jobs: JobTable = JobTable()
        self.tubes: dict[str, Tube] = {}
        self.tube_order: list[Tube] = []
        self.conns: dict[int, ConnState] = {}
        self.next_id = 1
        self.seq = 0  # last record sequence number handed out
        self.draining = False
        # The cmd-* counters, one per COUNTERS key in its order (compiled: C integers, so the
        # count a command adds is one C increment; command_counts reads them by key).
        self._counts = array("q", [0]) * len(COUNTERS)
        self.job_timeouts = 0
        self.total_jobs = 0
        self.total_connections = 0
        self.internal_conns = 0  # connections in ``conns`` that are no client's (engine.connect)
        self.body_bytes = 0  # sum of live job bodies (the WAL sizes its compaction by it)
        # (epoch, first log offset) per promotion this log went through, oldest first: from
        # EPOCH records and snapshot headers (stalkd.replication reads it for fencing)
        self.epochs: tuple[tuple[int, int], ...] = ()
        self._tube_serial = 0
        self._wait_serial = 0
        # Work that goes on in tick(): connections with a kick in progress, and connections
        # gone while their reserved jobs go back to ready (``Release``), served in turn.
        self._pending: deque[ConnState] = deque()
        self._tube_timers: IndexedHeap = IndexedHeap()
        self._conn_timers: IndexedHeap = IndexedHeap()
        # per-step scratch
        self._budget = step_jobs  # jobs this step may still move in bulk (expiries, kicks)
        self._now = 0  # the step's time in integer microseconds
        self._clock: float | None = None  # the time (seconds) _now was converted from
        self._records: list[Record] = []
        self._wakeups: list[tuple[int, C.AnyReply]] = []
        self._dirty: set[Tube] = set()
        self._caller: ConnState | None = None
        self._own: C.AnyReply | None = None
        self._room: Room | None = None  # Engine.room: where durable records get their WAL room
        # stored results (results.py's rules)
        self.results: dict[int, tuple[int, bytes]] = {}  # job id -> (deadline_us, body)
        self.result_bytes = 0
        # (deadline_us, job id); an entry whose deadline no longer matches ``results`` is stale
        self._result_heap: list[tuple[int, int]] = []
        self.result_limits = ResultLimits()
        self.result_meta: dict[int, tuple[str, str]] = {}  # job id -> (tube, owner)
        self.result_usage: dict[str, list[int]] = {}  # owner -> [results, bytes]
        self._owners: dict[int, str] = {}  # connection id -> owner, where not ""
        self._tube("default")

    @cython.locals(job=Job)
    def __del__(self) -> None:
        # Compiled, the cycle collector does not see jobs (objects.Job is no_gc), so it cannot
        # free a tube or a connection whose heaps hold jobs that refer back to them: an engine
        # let go with jobs in it (a standby's resync, a test) would keep them all. Cut each
        # job's two references that close such cycles, so tubes and jobs go with the engine.
        jobs = getattr(self, "jobs", None)  # (None, or unset uncompiled: __init__ refused its arguments)
        if jobs is None:
            return
        for job in jobs.values():
            job.tube = None
            job.owner = None

    def command_counts(self) -> dict[str, int]:
        """The per-command counters by key (``cmd-put``: the puts applied so far), a copy.

        >>> e = EngineState(); e.set_command_counts({"cmd-put": 3}); e.command_counts()["cmd-put"]
        3
        """
        counts = self._counts
        return {k: counts[i] for i, k in enumerate(COUNTERS)}

    def set_command_counts(self, counts: Mapping[str, int]) -> None:
        """Set the counters ``counts`` names (KeyError for a key that is no counter): a standby
        carries its clients' counts over a copy of its primary's state swapped in."""
        slots = [(counter_slot(k), n) for k, n in counts.items()]  # every key checked first
        for i, n in slots:
            self._counts[i] = n

    def _rec(self, op: Op, job_id: int) -> None:
        """Record a change with no fields beyond the header (DELETE, RESERVE, TOUCH, ...)."""
        self.seq += 1
        if self.keep_records:
            self._records.append(new_record(op, self.seq, self._now, job_id))

    def _rec_fields(
        self, op: Op, job_id: int, tube: str = "", pri: int = 0, delay: int = 0, ttr: int = 0,
        deadline_us: int = 0, body: bytes = b"", created_us: int = 0,
    ) -> None:  # fmt: skip
        self.seq += 1
        if self.keep_records:
            self._records.append(
                new_record(op, self.seq, self._now, job_id, tube, pri, delay, ttr, deadline_us, body, created_us)
            )

    def _wake(self, c: ConnState, reply: C.AnyReply) -> None:
        if c is self._caller:
            self._own = reply
        else:
            self._wakeups.append((c.id, reply))

    # --- timer heaps, kept in step with the containers ---------------------------------------

    def _retime_tube(self, t: Tube) -> None:
        when = t.timer_us()
        if when is None:
            if t.hpos >= 0:
                self._tube_timers.remove(t)
            return
        if t.hpos >= 0 and when == t.timer_at:
            return
        t.timer_at = when
        if t.hpos < 0:
            self._tube_timers.push(pack(when, t.serial), t)
        else:
            self._tube_timers.update(t, pack(when, t.serial))

    def _retime_conn(self, c: ConnState) -> None:
        when = c.timer_us()
        if when is None:
            if c.hpos >= 0:
                self._conn_timers.remove(c)
            return
        # Most changes leave the instant as it was (a job reserved or deleted below the soonest
        # deadline, or beside it with the same one): then no key is packed.
        if c.hpos >= 0 and when == c.timer_at:
            return
        c.timer_at = when
        if c.hpos < 0:
            self._conn_timers.push(pack(when, c.id), c)
        else:
            self._conn_timers.update(c, pack(when, c.id))

    # --- tubes and job containers -------------------------------------------------------------

    def _tube(self, name: str) -> Tube:
        t = self.tubes.get(name)
        if t is None:
            self._tube_serial += 1
            t = Tube(name, self._tube_serial)
            self.tubes[name] = t
            t.slot = len(self.tube_order)
            self.tube_order.append(t)
        return t

    def _maybe_drop_tube(self, t: Tube) -> None:
        if t.name == "default" or not t.unreferenced() or self.tubes.get(t.name) is not t:
            return
        del self.tubes[t.name]
        i = t.slot
        remove_swap_last(self.tube_order, i)
        if i < len(self.tube_order):
            self.tube_order[i].slot = i
        if t.hpos >= 0:
            self._tube_timers.remove(t)
        self._dirty.discard(t)

    @cython.locals(t=Tube)
    def _to_ready(self, j: Job) -> None:
        t = j.tube
        j.state = READY
        j.deadline_us = 0
        t.ready.push(pack(j.pri, j.id), j)
        if j.pri < URGENT_THRESHOLD:
            t.urgent += 1
        if t.waiting:  # only tubes with waiters can serve anyone
            self._dirty.add(t)

    def _to_delayed(self, j: Job, delay: int) -> None:
        j.state = DELAYED
        j.deadline_us = self._now + delay * US
        j.tube.delayed.push(pack(j.deadline_us, j.id), j)
        self._retime_tube(j.tube)

    def _to_buried(self, j: Job, order: int) -> None:
        j.state = BURIED
        j.deadline_us = order
        j.tube.buried[j.id] = j

    @cython.locals(t=Tube, c=ConnState)
    def _detach(self, j: Job) -> None:
        """Take a job out of whichever container holds it (its state is left for the caller)."""
        t = j.tube
        st = j.state
        if st is READY:
            t.ready.remove(j)
            if j.pri < URGENT_THRESHOLD:
                t.urgent -= 1
        elif st is DELAYED:
            t.delayed.remove(j)
            self._retime_tube(t)
        elif st is BURIED:
            del t.buried[j.id]
        else:
            c = j.owner
            assert c is not None
            # The connection's timer follows its soonest deadline, the top of its reserved
            # heap: a job from below the top leaves it as it was.
            top = j.hpos == 0
            c.reserved.remove(j)
            j.owner = None
            t.reserved -= 1
            if top and c.release is None:  # a gone connection has no timer
                self._retime_conn(c)

    def _give(self, c: ConnState, j: Job) -> None:
        """Reserve a detached job for ``c``."""
        j.state = RESERVED
        j.owner = c
        j.reserves += 1
        j.deadline_us = self._now + j.ttr * US
        c.reserved.push(pack(j.deadline_us, j.id), j)
        j.tube.reserved += 1
        self._rec(_OP_RESERVE, j.id)
        self._retime_conn(c)

    def _stop_waiting(self, c: ConnState) -> None:
        c.waiting = False
        c.wait_until_us = None
        for t in c.watch:
            t.waiting.pop(c.id, None)

    def _drop_conn(self, c: ConnState) -> None:
        if c.waiting:
            self._stop_waiting(c)
        if c.kick is not None:
            c.kick = None
            self._pending.remove(c)
        if c.hpos >= 0:
            self._conn_timers.remove(c)
        del self.conns[c.id]
        c.use.using -= 1
        self._maybe_drop_tube(c.use)
        reserved = c.reserved
        if len(reserved) + len(c.watch) <= self._budget:
            self._budget -= len(reserved) + len(c.watch)
            while reserved:
                j = reserved.pop()
                j.owner = None
                j.tube.reserved -= 1
                self._to_ready(j)
            for t in c.watch:
                t.watching -= 1
                self._maybe_drop_tube(t)
            return
        # More than this step may move: the rest goes on in later steps, the jobs first, most
        # urgent first, then the tubes it watched.
        c.release = Release(reserved.item_list())
        if not self._release_step(c):
            self._pending.append(c)

    def _release_step(self, c: ConnState) -> bool:
        """Hand back to ready what this step's budget allows of gone ``c``'s reserved jobs, in
        (pri, id) order once their keys are collected, then stop watching its tubes (freeing
        those nobody else needs, as beanstalkd does at once); True when nothing is left.

        To every other connection this looks like ``c`` releasing its jobs one by one, most
        urgent first, before it hung up: each state seen in between is one a live client could
        have made. Nothing is recorded (a reservation is not durable: after a crash these jobs
        are ready whether or not they got this far)."""
        rel = c.release
        assert rel is not None
        budget = self._budget
        held = rel.held
        keys = rel.keys
        if held is not None:
            at = rel.at
            end = min(len(held), at + budget * KEYS_PER_JOB)
            for h in held[at:end]:
                heappush(keys, (h.pri << 64) | h.id)
            budget += (at - end) // KEYS_PER_JOB  # minus ceil((end - at) / KEYS_PER_JOB)
            if end < len(held):
                rel.at = end
                self._budget = budget
                return False
            rel.held = None
        jobs = self.jobs
        reserved = c.reserved
        while budget > 0 and keys:
            budget -= 1
            j = jobs.get(heappop(keys) & _ID_MASK)
            if j is None or j.owner is not c:  # deleted or handed back early
                continue
            reserved.remove(j)
            j.owner = None
            j.tube.reserved -= 1
            self._to_ready(j)
        if reserved:
            self._budget = budget
            return False
        # Its tubes in watch order, as beanstalkd lets them go (list-tubes' order depends on
        # it). Taken off the list as they go: a freed tube is deallocated in its own step.
        watch = c.watch
        k = budget if budget > 0 else 0
        part = watch[:k]
        del watch[:k]
        for t in part:
            t.watching -= 1
            self._maybe_drop_tube(t)
        self._budget = budget - len(part)
        if watch:
            return False
        c.release = None
        return True

    def _release_held(self, j: Job) -> None:
        """A command names a job that a gone connection has not handed back yet: hand it back
        now (as if the connection had released it first), so the command sees it ready."""
        self._detach(j)
        self._to_ready(j)

    def holders(self) -> Iterator[ConnState]:
        """Every connection whose ``reserved`` may hold jobs: the engine's, then those gone
        while handing their jobs back (``Release``)."""
        yield from self.conns.values()
        for c in self._pending:
            if c.release is not None:
                yield c
