"""The job engine: beanstalkd's command semantics as a pure state machine (PROTOCOL.md §3, §4, §6).

``apply(conn, command, now)`` returns an :class:`Outcome`: the reply for that connection (or None
while it waits in reserve), the WAL records the step produced, replies for *other* waiting
connections it woke, and the next instant the engine needs ``tick``. No clock, socket or file is
touched here; ``now`` is wall-clock seconds (float), kept internally as integer microseconds.

Ensures, after every public call returns:
  * no unpaused tube has both waiting connections and ready jobs (every serveable waiter served);
  * no timer is overdue: every delay deadline, pause end, TTR, reserve timeout and safety-margin
    start is later than the last ``now`` seen (timers are run before and after each command, so
    a command never sees stale state even if the caller's ``tick`` was late);
  * every state change that must survive a restart is in ``Outcome.records``, in order, with a
    strictly increasing ``seq`` (an engine built with ``records=False`` builds none: nothing
    persists it, and the in-memory server saves ~1 us per record that way).

Simultaneous events resolve as: timers fire first, then waiters are served (a job beats a
timeout due at the same instant), then DEADLINE_SOON / TIMED_OUT go to those still waiting.
Waiters for a tube are served in arrival order; among tubes, the ready job with the lowest
(priority, id) goes first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from stalkd.engine import commands as C
from stalkd.engine import stats as S
from stalkd.engine.conn import Conn
from stalkd.engine.heap import IndexedHeap, pack
from stalkd.engine.job import URGENT_THRESHOLD, US, Job
from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.tube import Tube, remove_swap_last

__all__ = ["Engine", "EngineError", "Outcome"]

READY, RESERVED, BURIED, DELAYED = JobState.READY, JobState.RESERVED, JobState.BURIED, JobState.DELAYED
_NOT_FOUND = C.Reply("NOT_FOUND")
# Replies without per-command values are immutable, so one instance each serves every command.
_DELETED, _RELEASED, _BURIED, _TOUCHED = C.Reply("DELETED"), C.Reply("RELEASED"), C.Reply("BURIED"), C.Reply("TOUCHED")
_KICKED, _PAUSED = C.Reply("KICKED"), C.Reply("PAUSED")
_OP_PUT, _OP_DELETE, _OP_RESERVE = Op.PUT, Op.DELETE, Op.RESERVE
_new = object.__new__
_tuple_new = tuple.__new__
_set_word = C.Reply.__dict__["word"].__set__
_set_args = C.Reply.__dict__["args"].__set__
_set_jword = C.JobReply.__dict__["word"].__set__
_set_jid = C.JobReply.__dict__["id"].__set__
_set_jbody = C.JobReply.__dict__["body"].__set__

_RECORD_FIELDS = (
    "op", "seq", "time_us", "job_id", "tube", "pri", "delay", "ttr", "deadline_us", "body", "state",
    "created_us", "reserves", "timeouts", "releases", "buries", "kicks",
)  # fmt: skip
if tuple(f.name for f in dataclasses.fields(Record)) != _RECORD_FIELDS:  # pragma: no cover
    raise ImportError("model.Record's fields changed: update engine.make_record with them")
(_s_op, _s_seq, _s_time, _s_job, _s_tube, _s_pri, _s_delay, _s_ttr, _s_deadline, _s_body, _s_state,
 _s_created, _s_reserves, _s_timeouts, _s_releases, _s_buries, _s_kicks) = (
    Record.__dict__[f].__set__ for f in _RECORD_FIELDS)  # fmt: skip


def make_record(
    op: Op, seq: int, time_us: int, job_id: int, tube: str = "", pri: int = 0, delay: int = 0,
    ttr: int = 0, deadline_us: int = 0, body: bytes = b"", created_us: int = 0,
) -> Record:  # fmt: skip
    """``Record(op, seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body,
    created_us=created_us)``, about twice as fast: the frozen dataclass's ``__init__`` pays an
    ``object.__setattr__`` lookup and call per field (17) for every record the engine writes.
    Slots are set through their descriptors instead; the result compares equal to the
    constructor's (tests/engine/test_fast_values.py).

    >>> make_record(Op.DELETE, 3, 10, 7) == Record(Op.DELETE, 3, 10, 7)
    True
    """
    r: Record = _new(Record)
    _s_op(r, op)
    _s_seq(r, seq)
    _s_time(r, time_us)
    _s_job(r, job_id)
    _s_tube(r, tube)
    _s_pri(r, pri)
    _s_delay(r, delay)
    _s_ttr(r, ttr)
    _s_deadline(r, deadline_us)
    _s_body(r, body)
    _s_state(r, READY)
    _s_created(r, created_us)
    _s_reserves(r, 0)
    _s_timeouts(r, 0)
    _s_releases(r, 0)
    _s_buries(r, 0)
    _s_kicks(r, 0)
    return r


def _inserted(jid: int) -> C.Reply:
    """``Reply("INSERTED", (jid,))`` without the frozen dataclass's per-field ``__setattr__``
    (tests/engine/test_fast_values.py checks it equals the constructor's result)."""
    r: C.Reply = _new(C.Reply)
    _set_word(r, "INSERTED")
    _set_args(r, (jid,))
    return r


def _reserved(j: Job) -> C.JobReply:
    """``JobReply("RESERVED", j.id, j.body)``, built as ``_inserted`` is."""
    r: C.JobReply = _new(C.JobReply)
    _set_jword(r, "RESERVED")
    _set_jid(r, j.id)
    _set_jbody(r, j.body)
    return r


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


class Engine:
    """beanstalkd's job model.

    >>> from stalkd.engine.commands import Put, Reserve, Delete
    >>> e = Engine(); e.connect(1, now=100.0)
    >>> e.apply(1, Put(0, 0, 60, b"hello"), 100.0).reply
    Reply(word='INSERTED', args=(1,))
    >>> e.apply(1, Reserve(), 100.0).reply
    JobReply(word='RESERVED', id=1, body=b'hello')
    >>> e.apply(1, Delete(1), 101.0).reply
    Reply(word='DELETED', args=())
    """

    def __init__(self, max_job_size: int = 65535, records: bool = True) -> None:
        """``records=False``: an engine nobody persists (the in-memory server). ``Outcome.records``
        is then always empty and no Record is built; ``seq`` still counts the changes that would
        have been recorded (it orders buried FIFOs), so behaviour is otherwise identical.

        >>> from stalkd.engine.commands import Put
        >>> e = Engine(records=False); e.connect(1, 0.0)
        >>> e.apply(1, Put(0, 0, 60, b"x"), 0.0).records, e.seq
        ((), 1)
        """
        self.max_job_size = max_job_size
        self.keep_records = records
        self.jobs: dict[int, Job] = {}
        self.tubes: dict[str, Tube] = {}
        self.tube_order: list[Tube] = []
        self.conns: dict[int, Conn] = {}
        self.next_id = 1
        self.seq = 0  # last record sequence number handed out
        self.draining = False
        self.cmd: dict[str, int] = dict.fromkeys(S.CMD_KEYS, 0)
        self.job_timeouts = 0
        self.total_jobs = 0
        self.total_connections = 0
        self.body_bytes = 0  # sum of live job bodies (the WAL sizes its compaction by it)
        self._tube_serial = 0
        self._wait_serial = 0
        self._tube_timers: IndexedHeap[Tube] = IndexedHeap()
        self._conn_timers: IndexedHeap[Conn] = IndexedHeap()
        # per-step scratch
        self._now = 0
        self._records: list[Record] = []
        self._wakeups: list[tuple[int, C.AnyReply]] = []
        self._dirty: set[Tube] = set()
        self._caller: Conn | None = None
        self._own: C.AnyReply | None = None
        self._tube("default")
        self._handlers: dict[type, Callable[[Conn, Any], C.AnyReply | None]] = {
            C.Put: self._put, C.Use: self._use, C.Reserve: self._reserve_cmd,
            C.ReserveWithTimeout: self._reserve_cmd, C.ReserveJob: self._reserve_job,
            C.Delete: self._delete, C.Release: self._release, C.Bury: self._bury,
            C.Touch: self._touch, C.Watch: self._watch, C.Ignore: self._ignore,
            C.Peek: self._peek, C.PeekReady: self._peek_ready, C.PeekDelayed: self._peek_delayed,
            C.PeekBuried: self._peek_buried, C.Kick: self._kick, C.KickJob: self._kick_job,
            C.StatsJob: self._stats_job, C.StatsTube: self._stats_tube, C.Stats: self._stats,
            C.ListTubes: self._list_tubes, C.ListTubeUsed: self._list_tube_used,
            C.ListTubesWatched: self._list_tubes_watched, C.Quit: self._quit,
            C.PauseTube: self._pause_tube,
        }  # fmt: skip

    # --- public API ---------------------------------------------------------------------------

    def connect(self, conn_id: int, now: float) -> None:
        """Register a new connection: it uses and watches ``default``."""
        if conn_id in self.conns:
            raise EngineError(f"connection {conn_id} is already connected")
        default = self._tube("default")
        c = Conn(conn_id, default)
        default.using += 1
        default.watching += 1
        self.conns[conn_id] = c
        self.total_connections += 1

    def apply(self, conn_id: int, cmd: C.Command, now: float) -> Outcome:
        """Run one command for one connection at time ``now``."""
        c = self.conns.get(conn_id)
        if c is None:
            raise EngineError(f"connection {conn_id} is not connected")
        if c.waiting:
            raise EngineError(f"connection {conn_id} sent {type(cmd).__name__} while blocked in reserve")
        handler = self._handlers.get(type(cmd))
        if handler is None:
            raise EngineError(f"connection {conn_id}: {cmd!r} is not an engine command")
        # _begin/_finish inlined: this runs once per command and is the engine's hottest frame.
        # The scratch lists are reused (their contents leave as tuples); leftovers of a command
        # that raised are dropped here, as _begin does.
        nowus = self._now = round(now * US)
        recs = self._records
        wakes = self._wakeups
        if recs:
            recs.clear()
        if wakes:
            wakes.clear()
        self._caller = c
        self._own = None
        a = self._tube_timers._keys
        b = self._conn_timers._keys
        if self._dirty or (a and a[0] >> 64 <= nowus) or (b and b[0] >> 64 <= nowus):
            self._settle()
        reply = handler(c, cmd)
        a = self._tube_timers._keys
        b = self._conn_timers._keys
        if self._dirty or (a and a[0] >> 64 <= nowus) or (b and b[0] >> 64 <= nowus):
            self._settle()
            a = self._tube_timers._keys
            b = self._conn_timers._keys
        if reply is None:
            reply = self._own
        self._caller = None
        # next_deadline(), inlined
        k: int | None
        if a:
            k = min(a[0], b[0]) if b else a[0]
        elif b:
            k = b[0]
        else:
            k = None
        if recs:
            rt: tuple[Record, ...] = tuple(recs)
            recs.clear()
        else:
            rt = ()
        if wakes:
            wt: tuple[tuple[int, C.AnyReply], ...] = tuple(wakes)
            wakes.clear()
        else:
            wt = ()
        out: Outcome = _tuple_new(Outcome, (reply, rt, wt, None if k is None else (k >> 64) / US))
        return out

    def tick(self, now: float) -> Outcome:
        """Run every timer due at ``now``; ``next_deadline`` says when to call again."""
        self._begin(now, None)
        return self._finish(None)

    def disconnect(self, conn_id: int, now: float) -> Outcome:
        """The connection is gone: its reserved jobs return to ready, its wait is dropped.
        Unknown ids are ignored (``quit`` already disconnected)."""
        c = self.conns.get(conn_id)
        self._begin(now, None)
        if c is not None:
            self._drop_conn(c)
        return self._finish(None)

    def half_close(self, conn_id: int, now: float) -> Outcome:
        """The client shut down its sending side: a waiting reserve ends with TIMED_OUT, and
        later reserves that find no job time out at once."""
        c = self.conns.get(conn_id)
        if c is None:
            raise EngineError(f"connection {conn_id} is not connected")
        self._begin(now, c)
        c.half_closed = True
        reply: C.AnyReply | None = None
        if c.waiting:
            self._stop_waiting(c)
            self._retime_conn(c)
            reply = C.Reply("TIMED_OUT")
        return self._finish(reply)

    def set_draining(self, on: bool) -> None:
        """Drain mode (SIGUSR1): later puts reply DRAINING."""
        self.draining = on

    def next_deadline(self) -> float | None:
        """Absolute time (seconds) of the next timer, or None."""
        a = self._tube_timers._keys
        b = self._conn_timers._keys
        if a:
            k = min(a[0], b[0]) if b else a[0]
        elif b:
            k = b[0]
        else:
            return None
        return (k >> 64) / US

    def iter_jobs(self) -> Iterator[Job]:
        return iter(self.jobs.values())

    # --- step plumbing ------------------------------------------------------------------------

    def _begin(self, now: float, caller: Conn | None) -> None:
        self._now = round(now * US)
        self._records = []
        self._wakeups = []
        self._caller = caller
        self._own = None
        self._settle()

    def _finish(self, reply: C.AnyReply | None) -> Outcome:
        self._settle()
        if reply is None:
            reply = self._own
        recs = self._records
        wakes = self._wakeups
        out = Outcome(reply, tuple(recs) if recs else (), tuple(wakes) if wakes else (), self.next_deadline())
        self._caller = None
        return out

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

    def _wake(self, c: Conn, reply: C.AnyReply) -> None:
        if c is self._caller:
            self._own = reply
        else:
            self._wakeups.append((c.id, reply))

    def _settle(self) -> None:
        now = self._now
        th = self._tube_timers
        tkeys = th._keys  # hot path: peek at the heaps' key lists directly
        while tkeys and tkeys[0] >> 64 <= now:
            t = th.pop()
            while t.delayed and t.delayed._keys[0] >> 64 <= now:
                j = t.delayed.pop()
                self._to_ready(j)
            if t.pause_until_us and t.pause_until_us <= now:
                t.pause_until_us = 0
                t.pause_secs = 0
                if t.waiting:
                    self._dirty.add(t)
            self._retime_tube(t)
            tkeys = th._keys
        due: list[Conn] = []
        ch = self._conn_timers
        ckeys = ch._keys
        while ckeys and ckeys[0] >> 64 <= now:
            c = ch.pop()
            while c.reserved and c.reserved._keys[0] >> 64 <= now:
                j = c.reserved.pop()
                j.timeouts += 1
                self.job_timeouts += 1
                j.owner = None
                j.tube.reserved -= 1
                self._rec(Op.TIMEOUT, j.id)
                self._to_ready(j)
            due.append(c)
            ckeys = ch._keys
        if self._dirty:
            self._serve()
        for c in due:
            if c.waiting:
                if c.deadline_soon(now):
                    self._stop_waiting(c)
                    self._wake(c, C.Reply("DEADLINE_SOON"))
                elif c.wait_until_us is not None and c.wait_until_us <= now:
                    self._stop_waiting(c)
                    self._wake(c, C.Reply("TIMED_OUT"))
            if c.id in self.conns:
                self._retime_conn(c)

    def _serve(self) -> None:
        """Give ready jobs to waiting connections (beanstalkd's ``process_queue``)."""
        now, dirty = self._now, self._dirty
        while dirty:
            best: Tube | None = None
            best_key = 0
            for t in list(dirty):
                if not t.waiting or not t.ready or t.is_paused(now):
                    dirty.discard(t)
                    continue
                k = t.ready._keys[0]
                if best is None or k < best_key:
                    best, best_key = t, k
            if best is None:
                return
            j = best.ready.pop()
            if j.pri < URGENT_THRESHOLD:
                best.urgent -= 1
            c = next(iter(best.waiting.values()))
            self._stop_waiting(c)
            self._give(c, j)
            self._wake(c, C.JobReply("RESERVED", j.id, j.body))

    # --- timers -------------------------------------------------------------------------------

    def _retime_tube(self, t: Tube) -> None:
        when = t.timer_us()
        if when is None:
            if t.hpos >= 0:
                self._tube_timers.remove(t)
        elif t.hpos >= 0:
            self._tube_timers.update(t, pack(when, t.serial))
        else:
            self._tube_timers.push(pack(when, t.serial), t)

    def _retime_conn(self, c: Conn) -> None:
        # the common case, Conn.timer_us() inlined: not waiting, one or more jobs reserved
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

    def _give(self, c: Conn, j: Job) -> None:
        """Reserve a detached job for ``c``."""
        j.state = RESERVED
        j.owner = c
        j.reserves += 1
        j.deadline_us = self._now + j.ttr * US
        c.reserved.push(pack(j.deadline_us, j.id), j)
        j.tube.reserved += 1
        self._rec(_OP_RESERVE, j.id)
        self._retime_conn(c)

    def _stop_waiting(self, c: Conn) -> None:
        c.waiting = False
        c.wait_until_us = None
        for t in c.watch:
            t.waiting.pop(c.id, None)

    def _drop_conn(self, c: Conn) -> None:
        if c.waiting:
            self._stop_waiting(c)
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

    def _owned(self, c: Conn, job_id: int) -> Job | None:
        j = self.jobs.get(job_id)
        if j is None or j.state is not RESERVED or j.owner is not c:
            return None
        return j

    # --- commands -----------------------------------------------------------------------------

    def _put(self, c: Conn, cmd: C.Put) -> C.AnyReply:
        self.cmd["cmd-put"] += 1
        err = cmd.error
        body = cmd.body
        if err == "JOB_TOO_BIG" or len(body) > self.max_job_size:
            return C.Reply("JOB_TOO_BIG")
        c.producer = True  # as beanstalkd: only once the size check has passed
        if err == "EXPECTED_CRLF":
            self.next_id += 1  # beanstalkd allocates the id before reading the body
            return C.Reply("EXPECTED_CRLF")
        if self.draining:
            self.next_id += 1
            return C.Reply("DRAINING")
        jid = self.next_id
        self.next_id += 1
        t = c.use
        ttr = cmd.ttr
        delay = cmd.delay
        j = Job(jid, t, cmd.pri, delay, ttr if ttr > 1 else 1, body, READY, self._now)
        self.jobs[jid] = j
        self.body_bytes += len(body)
        t.total_jobs += 1
        self.total_jobs += 1
        if delay > 0:
            self._to_delayed(j, delay)
        else:
            self._to_ready(j)
        self.seq += 1
        if self.keep_records:
            now = self._now
            self._records.append(
                make_record(_OP_PUT, self.seq, now, jid, t.name, j.pri, j.delay, j.ttr, j.deadline_us, j.body, now)
            )
        return _inserted(jid)

    def _use(self, c: Conn, cmd: C.Use) -> C.AnyReply:
        self.cmd["cmd-use"] += 1
        t = self._tube(cmd.tube)
        old = c.use
        t.using += 1
        old.using -= 1
        c.use = t
        self._maybe_drop_tube(old)
        return C.Reply("USING", (t.name,))

    def _watch(self, c: Conn, cmd: C.Watch) -> C.AnyReply:
        self.cmd["cmd-watch"] += 1
        t = self._tube(cmd.tube)
        if t not in c.watch:
            c.watch.append(t)
            t.watching += 1
        return C.Reply("WATCHING", (len(c.watch),))

    def _ignore(self, c: Conn, cmd: C.Ignore) -> C.AnyReply:
        self.cmd["cmd-ignore"] += 1
        for i, t in enumerate(c.watch):
            if t.name == cmd.tube:
                if len(c.watch) < 2:
                    return C.Reply("NOT_IGNORED")
                remove_swap_last(c.watch, i)
                t.watching -= 1
                self._maybe_drop_tube(t)
                break
        return C.Reply("WATCHING", (len(c.watch),))

    def _reserve_cmd(self, c: Conn, cmd: C.Reserve | C.ReserveWithTimeout) -> C.AnyReply | None:
        timeout = None
        if type(cmd) is C.ReserveWithTimeout:
            self.cmd["cmd-reserve-with-timeout"] += 1
            timeout = cmd.timeout
        else:
            self.cmd["cmd-reserve"] += 1
        c.worker = True
        # Fast path: an unpaused watched tube with a ready job has no waiters (invariant), so
        # the best such job goes straight to this connection.
        best: Tube | None = None
        best_key = 0
        now = self._now
        for t in c.watch:
            keys = t.ready._keys
            if keys and (best is None or keys[0] < best_key) and now >= t.pause_until_us:  # not paused
                best, best_key = t, keys[0]
        if best is not None:
            j = best.ready.pop()
            if j.pri < URGENT_THRESHOLD:
                best.urgent -= 1
            self._give(c, j)
            return _reserved(j)
        if c.deadline_soon(now) and not any(t.ready for t in c.watch):
            return C.Reply("DEADLINE_SOON")
        if c.half_closed:
            timeout = 0
        c.waiting = True
        c.wait_until_us = None if timeout is None else self._now + timeout * US
        self._wait_serial += 1
        c.wait_seq = self._wait_serial
        for t in c.watch:
            t.waiting[c.id] = c
            self._dirty.add(t)
        self._retime_conn(c)
        return None

    def _reserve_job(self, c: Conn, cmd: C.ReserveJob) -> C.AnyReply:
        self.cmd["cmd-reserve-job"] += 1
        j = self.jobs.get(cmd.id)
        if j is None or j.state is RESERVED:
            return _NOT_FOUND
        c.worker = True  # as beanstalkd: a reserve-job that finds nothing does not make a worker
        self._detach(j)
        self._give(c, j)
        return C.JobReply("RESERVED", j.id, j.body)

    def _delete(self, c: Conn, cmd: C.Delete) -> C.AnyReply:
        self.cmd["cmd-delete"] += 1
        j = self.jobs.get(cmd.id)
        if j is None or (j.state is RESERVED and j.owner is not c):
            return _NOT_FOUND
        self._detach(j)
        del self.jobs[j.id]
        self.body_bytes -= len(j.body)
        j.tube.cmd_delete += 1
        self._rec(_OP_DELETE, j.id)
        t = j.tube
        if not t.using and not t.watching:  # else it cannot be dropped: skip the call
            self._maybe_drop_tube(t)
        return _DELETED

    def _release(self, c: Conn, cmd: C.Release) -> C.AnyReply:
        self.cmd["cmd-release"] += 1
        j = self._owned(c, cmd.id)
        if j is None:
            return _NOT_FOUND
        self._detach(j)
        j.pri = cmd.pri
        j.delay = cmd.delay
        j.releases += 1
        if cmd.delay > 0:
            self._to_delayed(j, cmd.delay)
        else:
            self._to_ready(j)
        self._rec_fields(Op.RELEASE, j.id, pri=j.pri, delay=j.delay, deadline_us=j.deadline_us)
        return _RELEASED

    def _bury(self, c: Conn, cmd: C.Bury) -> C.AnyReply:
        self.cmd["cmd-bury"] += 1
        j = self._owned(c, cmd.id)
        if j is None:
            return _NOT_FOUND
        self._detach(j)
        j.pri = cmd.pri
        j.buries += 1
        self._rec_fields(Op.BURY, j.id, pri=j.pri)
        self._to_buried(j, self.seq)
        return _BURIED

    def _touch(self, c: Conn, cmd: C.Touch) -> C.AnyReply:
        self.cmd["cmd-touch"] += 1
        j = self._owned(c, cmd.id)
        if j is None:
            return _NOT_FOUND
        j.deadline_us = self._now + j.ttr * US
        c.reserved.update(j, pack(j.deadline_us, j.id))
        self._retime_conn(c)
        self._rec(Op.TOUCH, j.id)
        return _TOUCHED

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

    def _kick_one(self, j: Job) -> None:
        self._detach(j)
        j.kicks += 1
        self._to_ready(j)
        self._rec(Op.KICK, j.id)

    def _kick(self, c: Conn, cmd: C.Kick) -> C.AnyReply:
        self.cmd["cmd-kick"] += 1
        t = c.use
        n = 0
        if t.buried:  # beanstalkd: any buried job means only buried jobs are kicked, oldest first
            while n < cmd.bound and t.buried:
                self._kick_one(next(iter(t.buried.values())))
                n += 1
        else:  # soonest deadline first
            while n < cmd.bound and (j := t.delayed.peek()) is not None:
                self._kick_one(j)
                n += 1
        return C.Reply("KICKED", (n,))

    def _kick_job(self, c: Conn, cmd: C.KickJob) -> C.AnyReply:
        self.cmd["cmd-kick-job"] += 1
        j = self.jobs.get(cmd.id)
        if j is None or j.state not in (BURIED, DELAYED):
            return _NOT_FOUND
        self._kick_one(j)
        return _KICKED

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

    def _quit(self, c: Conn, cmd: C.Quit) -> C.AnyReply:
        self._drop_conn(c)
        return C.Close()

    def _pause_tube(self, c: Conn, cmd: C.PauseTube) -> C.AnyReply:
        self.cmd["cmd-pause-tube"] += 1
        t = self.tubes.get(cmd.tube)
        if t is None:
            return _NOT_FOUND
        t.cmd_pause += 1
        if cmd.delay == 0:
            # beanstalkd stores 0 as 1 ns: the pause ends at once and waiters are served
            t.pause_until_us = 0
            t.pause_secs = 0
            if t.waiting:
                self._dirty.add(t)
        else:
            t.pause_until_us = self._now + cmd.delay * US
            t.pause_secs = cmd.delay
        self._retime_tube(t)
        self._rec_fields(Op.PAUSE, 0, tube=t.name, delay=cmd.delay, deadline_us=t.pause_until_us)
        return _PAUSED
