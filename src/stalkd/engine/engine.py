"""The job engine: beanstalkd's command semantics as a pure state machine (docs/protocol.md).

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
    persists it, and the in-memory server saves building one record per change that way).

Simultaneous events resolve as: timers fire first, then waiters are served (a job beats a
timeout due at the same instant), then DEADLINE_SOON / TIMED_OUT go to those still waiting.
Waiters for a tube are served in arrival order; among tubes, the ready job with the lowest
(priority, id) goes first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from stalkd.engine.model import Op
from stalkd.engine.objects import US, ConnState, Job, remove_swap_last
from stalkd.engine.results import Results
from stalkd.engine.room import Handler, Room, guarded
from stalkd.engine.state import STEP_JOBS, EngineError, Outcome, counter_slot
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


def _slot(spec: CommandSpec) -> int:
    """Where the engine keeps ``spec``'s counter (-1: it has none, as ``quit``)."""
    return -1 if spec.counter is None else counter_slot(spec.counter)


class Engine(Results):
    """beanstalkd's job model: the commands that change state, and the public API. One class
    in layers, each its module, each a subclass of the one before (one chain, so that compiled,
    each layer is an extension type calling the layers under it as C functions): state and
    container moves ``state.py``, timers and the step frame ``timers.py``, the commands that
    change a job ``jobcommands.py``, read-only commands ``queries.py``, stalkd's stored results
    ``results.py``; the connection and tube commands and the public API are here.

    >>> from stalkd.protocol.commands import Put, Reserve, Delete
    >>> e = Engine(); e.connect(1, now=100.0)
    >>> e.apply(1, Put(0, 0, 60, b"hello"), 100.0).reply
    Reply(word='INSERTED', args=(1,))
    >>> e.apply(1, Reserve(), 100.0).reply
    JobReply(word='RESERVED', id=1, body=b'hello')
    >>> e.apply(1, Delete(1), 101.0).reply
    Reply(word='DELETED', args=())
    """

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
        super().__init__(max_job_size, records, step_jobs)
        self._room = None
        # Dispatch derived from the command table: type -> (handler ``_<name>``, where its
        # counter is kept, -1 for none).
        self._plain: dict[object, tuple[Handler, int]] = {
            s.build: (getattr(self, "_" + s.name.replace("-", "_")), _slot(s)) for s in COMMANDS
        }
        self._dispatch: dict[object, tuple[Handler, int]] = self._plain

    def clear(self) -> None:
        """Forget every job, tube, connection and counter, keeping the settings and the room:
        a standby's copy replaced by its primary's is recovered into this same object, which
        the server and its hooks hold (``Wal.recover(into=...)``)."""
        room = self._room
        type(self).__init__(self, self.max_job_size, self.keep_records, self.step_jobs)
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
        return self._room

    @room.setter
    def room(self, room: Room | None) -> None:
        self._room = room
        self._dispatch = self._plain if room is None else {
            s.build: (guarded(self, s, self._plain[s.build][0]), _slot(s)) for s in COMMANDS
        }

    # --- public API ---------------------------------------------------------------------------

    def connect(self, conn_id: int, now: float, *, internal: bool = False) -> None:
        """Register a new connection: it uses and watches ``default``. ``internal``: the
        server's own holder of jobs, no client (it watches nothing, and no connection count or
        tube's using/watching count shows it)."""
        if conn_id in self.conns:
            raise EngineError(f"connection {conn_id} is already connected")
        default = self._tube("default")
        c = ConnState(conn_id, default)
        self.conns[conn_id] = c
        if internal:
            c.watch = []
            self.internal_conns += 1
            return
        default.using += 1
        default.watching += 1
        self.total_connections += 1

    @cython.locals(c=ConnState, counter=cython.Py_ssize_t)
    def apply(self, conn_id: int, cmd: C.Command, now: float) -> Outcome:
        """Run one command for one connection at time ``now``."""
        c = self.conns.get(conn_id)
        if c is None:
            raise EngineError(f"connection {conn_id} is not connected")
        if c.waiting or c.kick is not None:
            raise EngineError(f"connection {conn_id} sent {type(cmd).__name__} while blocked in reserve or kick")
        entry = self._dispatch.get(type(cmd))
        if entry is None:
            raise EngineError(f"connection {conn_id}: {cmd!r} is not an engine command")
        handler, counter = entry
        if counter >= 0:
            self._counts[counter] += 1
        self._begin(now, c)
        return self._finish(handler(c, cmd))

    def disconnect(self, conn_id: int, now: float) -> Outcome:
        """The connection is gone: its reserved jobs return to ready (more than a step's
        budget of them over later steps, most urgent first), its wait is dropped. Unknown ids
        are ignored (``quit`` already disconnected)."""
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

    def iter_jobs(self) -> Iterator[Job]:
        return iter(self.jobs.values())

    # --- commands -----------------------------------------------------------------------------

    def _use(self, c: ConnState, cmd: C.Use) -> C.AnyReply:
        t = self._tube(cmd.tube)
        old = c.use
        t.using += 1
        old.using -= 1
        c.use = t
        self._maybe_drop_tube(old)
        return C.Reply("USING", (t.name,))

    def _watch(self, c: ConnState, cmd: C.Watch) -> C.AnyReply:
        t = self._tube(cmd.tube)
        if t not in c.watch:
            c.watch.append(t)
            t.watching += 1
        return C.Reply("WATCHING", (len(c.watch),))

    def _ignore(self, c: ConnState, cmd: C.Ignore) -> C.AnyReply:
        for i, t in enumerate(c.watch):
            if t.name == cmd.tube:
                if len(c.watch) < 2:
                    return C.Reply("NOT_IGNORED")
                remove_swap_last(c.watch, i)
                t.watching -= 1
                self._maybe_drop_tube(t)
                break
        return C.Reply("WATCHING", (len(c.watch),))

    def _quit(self, c: ConnState, cmd: C.Quit) -> C.AnyReply:
        self._drop_conn(c)
        return C.Close()

    def _pause_tube(self, c: ConnState, cmd: C.PauseTube) -> C.AnyReply:
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
        self._rec_fields(Op.PAUSE, 0, tube=t.name, pri=0, delay=cmd.delay, ttr=0, deadline_us=t.pause_until_us)
        return _PAUSED

