"""The job engine: beanstalkd's command semantics as a pure state machine (docs/protocol.md).

``apply(conn, command, now)`` returns an :class:`Outcome`: the reply for that connection (or None
while it waits in reserve), the WAL records the step produced, replies for *other* waiting
connections it woke, and the next instant the engine needs ``tick``. No clock, socket or file is
touched here; ``now`` is wall-clock seconds (float), kept internally as integer microseconds.
``Engine`` is the API over one ``EngineState``; the rules are functions over that state, in
timers.py, jobcommands.py, queries.py, results.py and (connection and tube commands) here.

Ensures, after every public call returns:
  * no unpaused tube has both waiting connections and ready jobs (every serveable waiter served);
  * no timer is overdue: every delay deadline, pause end, TTR, reserve timeout and safety-margin
    start is later than the last ``now`` seen (timers are run before and after each command, so
    a command never sees stale state even if the caller's ``tick`` was late);
  * every state change that must survive a restart is in ``Outcome.records``, in order, with a
    strictly increasing ``seq`` (an engine built with ``records=False`` builds none: nothing
    persists it, and the in-memory server saves building one record per change that way).

Simultaneous events resolve as: timers fire first, then waiters are served (a job beats a
timeout due at the same instant), then DEADLINE_SOON / TIMED_OUT go to those still waiting.
Waiters for a tube are served in arrival order; among tubes, the ready job with the lowest
(priority, id) goes first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from stalkd.engine import jobcommands, queries, results, timers
from stalkd.engine.heap import IndexedHeap
from stalkd.engine.jobtable import JobTable
from stalkd.engine.model import Op, Record
from stalkd.engine.objects import US, ConnState, Job, Tube, remove_swap_last
from stalkd.engine.room import OUT_OF_MEMORY, Handler, Room, guarded, put_refused
from stalkd.engine.state import (
    STEP_JOBS,
    EngineError,
    EngineState,
    Outcome,
    ResultLimits,
    counter_slot,
)
from stalkd.protocol import commands as C
from stalkd.protocol.grammar import COMMANDS, CommandSpec

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Engine", "EngineError", "Outcome", "Room"]

_NOT_FOUND = C.Reply("NOT_FOUND")
_PAUSED = C.Reply("PAUSED")
_T = TypeVar("_T")


class _Field(Generic[_T]):
    """A field of the engine's state, read and set through the engine: ``e.jobs`` is
    ``e.state.jobs`` (for the server, recovery and replication, which hold the engine)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, e: Engine | None, owner: object = None) -> _T:
        if e is None:  # read on the class (introspection): the descriptor itself
            return cast(_T, self)
        value: _T = getattr(e.state, self.name)
        return value

    def __set__(self, e: Engine, value: _T) -> None:
        setattr(e.state, self.name, value)


class Engine:
    """beanstalkd's job model: the public API over one ``EngineState`` (``state``, state.py).

    The rules are functions over that state, one module each: the step frame and timers
    ``timers.py``, the commands that change a job ``jobcommands.py``, read-only commands
    ``queries.py``, stalkd's stored results ``results.py``; the connection and tube commands
    are here. ``apply`` finds a command's handler in a table derived from the command table
    (``_handler``), and every step is ``timers.begin_step``, the handler, ``timers.finish_step``;
    ``tick`` is a step with no command, in which a kick or a hang-up in progress goes on
    (``jobcommands.more``) and expired results are forgotten. The state's fields are read and
    set through the engine too (``e.jobs``, ``e.seq``...: ``_Field``, below).

    >>> from stalkd.protocol.commands import Put, Reserve, Delete
    >>> e = Engine(); e.connect(1, now=100.0)
    >>> e.apply(1, Put(0, 0, 60, b"hello"), 100.0).reply
    Reply(word='INSERTED', args=(1,))
    >>> e.apply(1, Reserve(), 100.0).reply
    JobReply(word='RESERVED', id=1, body=b'hello')
    >>> e.apply(1, Delete(1), 101.0).reply
    Reply(word='DELETED', args=())
    """

    __slots__ = ("state", "_dispatch", "__weakref__")

    def __init__(self, max_job_size: int = 65535, records: bool = True, step_jobs: int = STEP_JOBS) -> None:
        """``records=False``: an engine nobody persists (the in-memory server). ``Outcome.records``
        is then always empty and no Record is built; ``seq`` still counts the changes that would
        have been recorded (it orders buried FIFOs), so behaviour is otherwise identical.
        ``step_jobs``: how many jobs one step may move in bulk (timers.py).

        >>> from stalkd.protocol.commands import Put
        >>> e = Engine(records=False); e.connect(1, 0.0)
        >>> e.apply(1, Put(0, 0, 60, b"x"), 0.0).records, e.seq
        ((), 1)
        """
        self.state = EngineState(max_job_size, records, step_jobs)
        self._dispatch: dict[object, tuple[Handler, int]] = _PLAIN

    def clear(self) -> None:
        """Forget every job, tube, connection and counter, keeping the settings and the room:
        a standby's copy replaced by its primary's is recovered into this same object, which
        the server and its hooks hold (``Wal.recover(into=...)``)."""
        s = self.state
        room = s._room
        type(self).__init__(self, s.max_job_size, s.keep_records, s.step_jobs)
        self.room = room

    @property
    def room(self) -> Room | None:
        """Where durable records get their WAL room; None (the default) never refuses.

        With a room, each command the table marks with a WAL cost first runs its own job
        look-up (the handler's, so NOT_FOUND wins as in beanstalkd, which looks the job up
        before reserving log space), then asks the room, and a refusal changes nothing:
        OUT_OF_MEMORY for put, bury and a delayed release, NOT_FOUND for kick-job, fewer jobs
        kicked for kick. A release to ready is never refused: without room its record is left
        out (beanstalkd never logs one; the job is back in ready after a restart anyway).

        >>> from stalkd.protocol.commands import Put
        >>> class Full:
        ...     def put(self, body_len: int) -> bool: return False
        ...     def updates(self, n: int) -> int: return 0
        >>> e = Engine(); e.room = Full(); e.connect(1, 0.0)
        >>> e.apply(1, Put(0, 0, 60, b"x"), 0.0).reply, len(e.jobs)
        (Reply(word='OUT_OF_MEMORY', args=()), 0)
        """
        return self.state._room

    @room.setter
    def room(self, room: Room | None) -> None:
        self.state._room = room
        self._dispatch = _PLAIN if room is None else _GUARDED

    # --- public API ---------------------------------------------------------------------------

    def connect(self, conn_id: int, now: float, *, internal: bool = False) -> None:
        """Register a new connection: it uses and watches ``default``. ``internal``: the
        server's own holder of jobs, no client (it watches nothing, and no connection count or
        tube's using/watching count shows it)."""
        s = self.state
        if conn_id in s.conns:
            raise EngineError(f"connection {conn_id} is already connected")
        default = s._tube("default")
        c = ConnState(conn_id, default)
        s.conns[conn_id] = c
        if internal:
            c.watch = []
            s.internal_conns += 1
            return
        default.using += 1
        default.watching += 1
        s.total_connections += 1

    @cython.locals(s=EngineState, c=ConnState, counter=cython.Py_ssize_t)
    def apply(self, conn_id: int, cmd: C.Command, now: float) -> Outcome:
        """Run one command for one connection at time ``now``."""
        s = self.state
        c = s.conns.get(conn_id)
        if c is None:
            raise EngineError(f"connection {conn_id} is not connected")
        if c.waiting or c.kick is not None:
            raise EngineError(f"connection {conn_id} sent {type(cmd).__name__} while blocked in reserve or kick")
        entry = self._dispatch.get(type(cmd))
        if entry is None:
            raise EngineError(f"connection {conn_id}: {cmd!r} is not an engine command")
        handler, counter = entry
        if counter >= 0:
            s._counts[counter] += 1
        timers.begin_step(s, now, c)
        if type(cmd) is C.Put and _PUT_DIRECT:
            # The hot command without its table entry's two Python calls (room.guarded's put,
            # then the handler): the same room check and handler, as C calls when compiled.
            if put_refused(s._room, cmd, s.max_job_size, s.draining):
                return timers.finish_step(s, OUT_OF_MEMORY)
            return timers.finish_step(s, jobcommands.put(s, c, cython.cast(C.Put, cmd)))
        return timers.finish_step(s, handler(s, c, cmd))

    @cython.locals(s=EngineState)
    def tick(self, now: float) -> Outcome:
        """Run the timers due at ``now`` and one step of a kick or a hang-up in progress,
        moving at most ``step_jobs`` jobs, then forget the results due; ``next_deadline`` says
        when to call again (``now`` or earlier while work is left)."""
        s = self.state
        timers.begin_step(s, now, None)
        if s._pending:
            jobcommands.more(s)
        out = timers.finish_step(s, None)
        results.expire_results(s, s._now)
        return out

    def behind(self) -> bool:
        """Whether the last step left work for the next one (a kick, a hang-up's jobs, or jobs
        still due)."""
        return timers.behind(self.state)

    def next_deadline(self) -> float | None:
        """Absolute time (seconds) of the next timer, or None."""
        return timers.next_deadline(self.state)

    def disconnect(self, conn_id: int, now: float) -> Outcome:
        """The connection is gone: its reserved jobs return to ready (more than a step's
        budget of them over later steps, most urgent first), its wait is dropped. Unknown ids
        are ignored (``quit`` already disconnected)."""
        s = self.state
        c = s.conns.get(conn_id)
        timers.begin_step(s, now, None)
        if c is not None:
            s._drop_conn(c)
        return timers.finish_step(s, None)

    def half_close(self, conn_id: int, now: float) -> Outcome:
        """The client shut down its sending side: a waiting reserve ends with TIMED_OUT, and
        later reserves that find no job time out at once."""
        s = self.state
        c = s.conns.get(conn_id)
        if c is None:
            raise EngineError(f"connection {conn_id} is not connected")
        timers.begin_step(s, now, c)
        c.half_closed = True
        reply: C.AnyReply | None = None
        if c.waiting:
            s._stop_waiting(c)
            s._retime_conn(c)
            reply = C.Reply("TIMED_OUT")
        return timers.finish_step(s, reply)

    def set_draining(self, on: bool) -> None:
        """Drain mode (SIGUSR1): later puts reply DRAINING."""
        self.state.draining = on

    def iter_jobs(self) -> Iterator[Job]:
        return iter(self.state.jobs.values())

    def command_counts(self) -> dict[str, int]:
        """The per-command counters by key (``cmd-put``: the puts applied so far), a copy."""
        return self.state.command_counts()

    def set_command_counts(self, counts: Mapping[str, int]) -> None:
        """Set the counters ``counts`` names (state.py)."""
        self.state.set_command_counts(counts)

    def holders(self) -> Iterator[ConnState]:
        """Every connection whose ``reserved`` may hold jobs (state.py)."""
        return self.state.holders()

    # --- stored results (results.py) ----------------------------------------------------------

    def expire_results(self, now_us: int) -> int:
        """Forget every result due at or before ``now_us``; how many were forgotten."""
        return results.expire_results(self.state, now_us)

    def store_result(self, job_id: int, deadline_us: int, body: bytes, *,
                     tube: str | None = None, owner: str = results.RECOVERED) -> None:
        """Keep ``body`` for ``job_id`` until ``deadline_us`` (results.py); also recovery's."""
        results.store_result(self.state, job_id, deadline_us, body, tube=tube, owner=owner)

    def name_owner(self, conn_id: int, owner: str | None) -> None:
        """Count the results ``conn_id`` stores as ``owner``'s (None: forget the connection)."""
        results.name_owner(self.state, conn_id, owner)

    def result_tube(self, job_id: int) -> str | None:
        """The tube a kept result belongs to (``""``: lost in a restart); None: no result."""
        return results.result_tube(self.state, job_id)

    def result_records(self) -> list[Record]:
        """Every live result as a RESULT record with a fresh seq (results.py)."""
        return results.result_records(self.state)

    def iter_results(self) -> Iterator[tuple[int, int, bytes]]:
        """(job id, deadline_us, body) of every result held, expired or not."""
        return results.iter_results(self.state)

    # --- container moves recovery uses (stalkd.persist: snapshots and the WAL tail) -----------

    def tube_named(self, name: str) -> Tube:
        """The tube ``name``, made if it does not exist (as a command naming it would)."""
        return self.state._tube(name)

    def detach(self, j: Job) -> None:
        """Take ``j`` out of whichever container holds it (ready, delayed, buried, reserved)."""
        self.state._detach(j)

    def retime_tube(self, t: Tube) -> None:
        """Put ``t``'s next deadline (its soonest delayed job, its pause) in the timer heap."""
        self.state._retime_tube(t)

    # --- the state's fields, read and set through the engine (``_Field``) -------------------

    jobs = _Field[JobTable]("jobs")
    tubes = _Field[dict[str, Tube]]("tubes")
    tube_order = _Field[list[Tube]]("tube_order")
    conns = _Field[dict[int, ConnState]]("conns")
    max_job_size = _Field[int]("max_job_size")
    step_jobs = _Field[int]("step_jobs")
    keep_records = _Field[bool]("keep_records")
    draining = _Field[bool]("draining")
    next_id = _Field[int]("next_id")
    seq = _Field[int]("seq")
    epochs = _Field[tuple[tuple[int, int], ...]]("epochs")
    body_bytes = _Field[int]("body_bytes")
    job_timeouts = _Field[int]("job_timeouts")
    total_jobs = _Field[int]("total_jobs")
    total_connections = _Field[int]("total_connections")
    internal_conns = _Field[int]("internal_conns")
    results = _Field[dict[int, tuple[int, bytes]]]("results")
    result_bytes = _Field[int]("result_bytes")
    result_meta = _Field[dict[int, tuple[str, str]]]("result_meta")
    result_usage = _Field[dict[str, list[int]]]("result_usage")
    result_limits = _Field[ResultLimits]("result_limits")
    last_step_us = _Field[int]("_now")  # the last step's time, integer microseconds (compaction's)
    _tube_timers = _Field[IndexedHeap]("_tube_timers")


# --- the connection and tube commands ---------------------------------------------------------


def use(s: EngineState, c: ConnState, cmd: C.Use) -> C.AnyReply:
    t = s._tube(cmd.tube)
    old = c.use
    t.using += 1
    old.using -= 1
    c.use = t
    s._maybe_drop_tube(old)
    return C.Reply("USING", (t.name,))


def watch(s: EngineState, c: ConnState, cmd: C.Watch) -> C.AnyReply:
    t = s._tube(cmd.tube)
    if t not in c.watch:
        c.watch.append(t)
        t.watching += 1
    return C.Reply("WATCHING", (len(c.watch),))


def ignore(s: EngineState, c: ConnState, cmd: C.Ignore) -> C.AnyReply:
    for i, t in enumerate(c.watch):
        if t.name == cmd.tube:
            if len(c.watch) < 2:
                return C.Reply("NOT_IGNORED")
            remove_swap_last(c.watch, i)
            t.watching -= 1
            s._maybe_drop_tube(t)
            break
    return C.Reply("WATCHING", (len(c.watch),))


def quit(s: EngineState, c: ConnState, cmd: C.Quit) -> C.AnyReply:  # noqa: A001 - the command's name
    s._drop_conn(c)
    return C.Close()


def pause_tube(s: EngineState, c: ConnState, cmd: C.PauseTube) -> C.AnyReply:
    t = s.tubes.get(cmd.tube)
    if t is None:
        return _NOT_FOUND
    t.cmd_pause += 1
    if cmd.delay == 0:
        # beanstalkd stores 0 as 1 ns: the pause ends at once and waiters are served
        t.pause_until_us = 0
        t.pause_secs = 0
        if t.waiting:
            s._dirty.add(t)
    else:
        t.pause_until_us = s._now + cmd.delay * US
        t.pause_secs = cmd.delay
    s._retime_tube(t)
    s._rec_fields(Op.PAUSE, 0, tube=t.name, pri=0, delay=cmd.delay, ttr=0, deadline_us=t.pause_until_us)
    return _PAUSED


# --- the dispatch -----------------------------------------------------------------------------


def _handler(name: str) -> Handler:
    """The function that runs command ``name``, named as it is (``reserve-job``: ``reserve_job``):
    the first found of results.py (whose ``stats`` extends queries'), queries.py,
    jobcommands.py, then this module's connection and tube commands."""
    py = name.replace("-", "_")
    for rules in (results, queries, jobcommands):
        if py in rules.__all__:
            f: Handler = getattr(rules, py)
            return f
    f = globals()[py]
    return f


def _slot(spec: CommandSpec) -> int:
    """Where the engine keeps ``spec``'s counter (-1: it has none, as ``quit``)."""
    return -1 if spec.counter is None else counter_slot(spec.counter)


# Derived from the command table: command type -> (handler, where its counter is kept, -1 for
# none); with a room, each handler behind the room check its row asks for (room.py).
_PLAIN: dict[object, tuple[Handler, int]] = {s.build: (_handler(s.name), _slot(s)) for s in COMMANDS}
_GUARDED: dict[object, tuple[Handler, int]] = {
    s.build: (guarded(s, _PLAIN[s.build][0]), _slot(s)) for s in COMMANDS
}
# Engine.apply runs a put itself when the table's put is jobcommands.put (behind room.guarded's
# put, the same put_refused check, with a room): its two Python calls per put become C calls.
# (getattr: compiled, ``jobcommands.put`` names the cimported C function, not the Python object
# the table holds.)
_PUT_DIRECT = _PLAIN[C.Put][0] is getattr(jobcommands, "put")  # noqa: B009
