"""The engine's state and the moves between its containers (beanstalkd's ``tube.c``/``job.c``).

``EngineState`` holds jobs, tubes, connections, counters, the two timer heaps and the per-step
scratch; its methods move a job between containers (ready heap, delay heap, buried FIFO, a
connection's reserved heap), create and free tubes, and keep the timer heaps in step with them.
The commands (``engine.py``), timers (``timers.py``) and queries (``queries.py``) build on it.

Ensures, after each method: a job's ``state`` names the one container holding it (job.py); a
tube or connection is in its timer heap exactly when it has a timer, keyed by that instant
(``_retime_tube``/``_retime_conn`` are called after every change that can move one); a tube
with waiters that gained a ready job is in ``_dirty`` (to be served before the step ends);
a tube is freed exactly when beanstalkd would (no jobs, users or watchers; never ``default``).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from stalkd.engine.fastvalues import make_record
from stalkd.engine.heap import IndexedHeap, pack
from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.objects import URGENT_THRESHOLD, US, ConnState, Job, Tube, remove_swap_last
from stalkd.protocol import commands as C
from stalkd.protocol.grammar import COUNTERS

__all__ = ["EngineError", "EngineState", "Outcome", "STEP_JOBS"]

STEP_JOBS = 256
"""Jobs one engine step may move in bulk (delays and TTRs expiring, a kick): work that grows
with the number of jobs goes on in later steps, so no step holds the event loop for long.
A count, not a clock: the engine stays pure (a delayed kick costs tens of microseconds)."""

READY, RESERVED, BURIED, DELAYED = JobState.READY, JobState.RESERVED, JobState.BURIED, JobState.DELAYED
_OP_RESERVE = Op.RESERVE


class EngineError(ValueError):
    """The caller broke the engine's contract (unknown connection, command while waiting, ...)."""


class Outcome(NamedTuple):
    """What one engine step produced (immutable; a NamedTuple because one is built per command).

    ``reply`` is for the calling connection (None: it is now blocked in reserve); ``wakeups``
    are replies for other connections that were waiting; ``records`` must be durable (their
    DURABLE_OPS ones) before any of these replies is sent.
    """

    reply: C.AnyReply | None
    records: tuple[Record, ...]
    wakeups: tuple[tuple[int, C.AnyReply], ...]
    next_deadline: float | None


class EngineState:
    """Jobs, tubes, connections and timers, with the container moves every command shares."""

    def __init__(self, max_job_size: int = 65535, records: bool = True, step_jobs: int = STEP_JOBS) -> None:
        if step_jobs < 1:
            raise ValueError(f"step_jobs must be >= 1, got {step_jobs}")
        self.max_job_size = max_job_size
        self.step_jobs = step_jobs
        self.keep_records = records
        self.jobs: dict[int, Job] = {}
        self.tubes: dict[str, Tube] = {}
        self.tube_order: list[Tube] = []
        self.conns: dict[int, ConnState] = {}
        self.next_id = 1
        self.seq = 0  # last record sequence number handed out
        self.draining = False
        self.cmd: dict[str, int] = dict.fromkeys(COUNTERS, 0)
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
        self._kicks: deque[ConnState] = deque()  # connections whose kick goes on in tick()
        self._tube_timers: IndexedHeap[Tube] = IndexedHeap()
        self._conn_timers: IndexedHeap[ConnState] = IndexedHeap()
        # per-step scratch
        self._budget = step_jobs  # jobs this step may still move in bulk (expiries, kicks)
        self._now = 0
        self._records: list[Record] = []
        self._wakeups: list[tuple[int, C.AnyReply]] = []
        self._dirty: set[Tube] = set()
        self._caller: ConnState | None = None
        self._own: C.AnyReply | None = None
        self._tube("default")

    def _rec(self, op: Op, job_id: int) -> None:
        """Record a change with no fields beyond the header (DELETE, RESERVE, TOUCH, ...)."""
        self.seq += 1
        if self.keep_records:
            self._records.append(make_record(op, self.seq, self._now, job_id))

    def _rec_fields(
        self, op: Op, job_id: int, tube: str = "", pri: int = 0, delay: int = 0, ttr: int = 0,
        deadline_us: int = 0, body: bytes = b"", created_us: int = 0,
    ) -> None:  # fmt: skip
        self.seq += 1
        if self.keep_records:
            self._records.append(
                make_record(op, self.seq, self._now, job_id, tube, pri, delay, ttr, deadline_us, body, created_us)
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
        elif t.hpos >= 0:
            self._tube_timers.update(t, pack(when, t.serial))
        else:
            self._tube_timers.push(pack(when, t.serial), t)

    def _retime_conn(self, c: ConnState) -> None:
        # the common case, ConnState.timer_us() inlined: not waiting, one or more jobs reserved
        if not c.waiting:
            items = c.reserved._items
            if items:
                key = pack(items[0].deadline_us, c.id)
                if c.hpos >= 0:
                    if self._conn_timers._keys[c.hpos] != key:
                        self._conn_timers.update(c, key)
                else:
                    self._conn_timers.push(key, c)
                return
        when = c.timer_us()
        if when is None:
            if c.hpos >= 0:
                self._conn_timers.remove(c)
        elif c.hpos >= 0:
            self._conn_timers.update(c, pack(when, c.id))
        else:
            self._conn_timers.push(pack(when, c.id), c)

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
            c.reserved.remove(j)
            j.owner = None
            t.reserved -= 1
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
            self._kicks.remove(c)
        while c.reserved:
            j = c.reserved.pop()
            j.owner = None
            j.tube.reserved -= 1
            self._to_ready(j)
        if c.hpos >= 0:
            self._conn_timers.remove(c)
        del self.conns[c.id]
        c.use.using -= 1
        self._maybe_drop_tube(c.use)
        for t in c.watch:
            t.watching -= 1
            self._maybe_drop_tube(t)
