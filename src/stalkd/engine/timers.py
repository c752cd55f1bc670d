"""Time in the engine: running due timers, serving waiting reservers, and the step frame.

Every public engine call is a *step*: ``begin_step(s, now)`` runs the timers due at ``now``,
the command runs, ``finish_step`` runs them again and serves waiters, and the step's replies,
records and next deadline leave as one ``Outcome``. Timers are delay expiry and pause end
(tube timer heap), TTR expiry, DEADLINE_SOON's safety margin and reserve-with-timeout
(connection timer heap); ``Engine.tick(now)`` is a step with no command. These are functions
over the engine's state ``s`` (state.py); compiled, C functions (timers.pxd).

Work that grows with the number of jobs is done in slices: one step moves at most
``step_jobs`` jobs in bulk (delays and TTRs expiring, a kick's jobs, the reserved jobs of a
connection that hung up); what is left stays due
and ``next_deadline`` is then ``now``, so the caller ticks again at once, after serving its
other clients. beanstalkd moves due jobs only between reads too (``prottick``), so a command
that meets a due job still delayed sees what it would have seen arriving a moment earlier.

Ensures, when a step ends: at most ``step_jobs`` jobs (or tubes let go) were moved by timers,
kicks and hang-ups; no timer is due at or before ``now`` unless that budget ran out (then
``next_deadline() <= now``); no unpaused tube has both waiters and ready jobs; events at the same instant resolve as timers
first, then waiters served (a job beats a timeout due at the same instant: while jobs are left
due, no reserve times out and no DEADLINE_SOON is sent), then DEADLINE_SOON / TIMED_OUT for
those still waiting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stalkd.engine.heap import IndexedHeap
from stalkd.engine.model import Op
from stalkd.engine.objects import URGENT_THRESHOLD, US, ConnState, Job, Tube, job_body, to_us
from stalkd.engine.state import EngineState, Outcome
from stalkd.protocol import commands as C

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

if not cython.compiled:  # compiled, timers.pxd cimports it (heap.pxd's inline C)
    from stalkd.engine.heap import _lt

__all__ = ["begin_step", "behind", "finish_step", "next_deadline"]


def behind(s: EngineState) -> bool:
    """Whether the last step left work for the next one (a kick, a hang-up's jobs, or jobs
    still due)."""
    if s._pending:
        return True
    return _tube_due(s._tube_timers, s._now) or _conn_due(s._conn_timers, s._now)


@cython.locals(t=Tube, c=ConnState)
def next_deadline(s: EngineState) -> float | None:
    """Absolute time (seconds) of the next timer, or None."""
    if s._pending:
        return s._now / US  # a kick or a hang-up goes on: call tick again at once
    # The soonest tube and connection: their instants are in timer_at (no key shifted back).
    t = s._tube_timers.peek()
    c = s._conn_timers.peek()
    a = None if t is None else t.timer_at
    b = None if c is None else c.timer_at
    k = b if a is None else a if b is None else min(a, b)
    return None if k is None else k / US


# --- the step frame ---------------------------------------------------------------------------


def begin_step(s: EngineState, now: float, caller: ConnState | None) -> None:
    """Start a step at ``now`` for ``caller`` (None: no connection's command): run the timers due."""
    if now != s._clock:  # the commands of one read share their time: convert it once
        s._clock = now
        s._now = to_us(now)
    s._budget = s.step_jobs
    # a step starts with empty scratch lists (their contents left the last one as tuples;
    # leftovers of a step that raised are dropped); most steps have no wakeups, and an
    # in-memory engine no records, so a list is made only when the last one was used
    if s._records:
        s._records = []
    if s._wakeups:
        s._wakeups = []
    s._caller = caller
    s._own = None
    _settle(s)


@cython.locals(out=Outcome)
def finish_step(s: EngineState, reply: C.AnyReply | None) -> Outcome:
    """End the step: run the timers again, serve waiters, and build its ``Outcome``."""
    _settle(s)
    if reply is None:
        reply = s._own
    recs = s._records
    wakes = s._wakeups
    # The one place an Outcome is built. Its fields are set one by one: compiled, that is a
    # C allocation and four struct writes, where a call with arguments would be a Python call.
    out = Outcome.__new__(Outcome)
    out.reply = reply
    out.records = tuple(recs) if recs else ()
    out.wakeups = tuple(wakes) if wakes else ()
    out.next_deadline = next_deadline(s)
    s._caller = None
    return out


@cython.locals(t=Tube, c=ConnState, j=Job, budget=cython.Py_ssize_t)
def _settle(s: EngineState) -> None:
    now = s._now
    budget = s._budget
    th = s._tube_timers
    while budget > 0 and _tube_due(th, now):
        t = th.pop()
        delayed = t.delayed
        while budget > 0 and _job_due(delayed, now):
            s._to_ready(delayed.pop())
            budget -= 1
        if t.pause_until_us and t.pause_until_us <= now:
            t.pause_until_us = 0
            t.pause_secs = 0
            if t.waiting:
                s._dirty.add(t)
        s._retime_tube(t)  # still due when the budget ran out: the next step goes on
    late = _tube_due(th, now)
    due: list[ConnState] | None = None  # made when a connection's timer fires: most steps none
    ch = s._conn_timers
    while not late and _conn_due(ch, now):
        c = ch.pop()
        reserved = c.reserved
        while _job_due(reserved, now):
            if budget <= 0:
                late = True
                break
            j = reserved.pop()
            j.timeouts += 1
            s.job_timeouts += 1
            j.owner = None
            j.tube.reserved -= 1
            s._rec(Op.TIMEOUT, j.id)
            s._to_ready(j)
            budget -= 1
        if due is None:
            due = []
        due.append(c)
    s._budget = budget
    if s._dirty:
        _serve(s)
    for c in due or ():
        # Jobs left due may be the job a waiter should get: its timeout waits a step.
        if c.waiting and not late:
            if c.deadline_soon(now):
                s._stop_waiting(c)
                s._wake(c, C.Reply("DEADLINE_SOON"))
            elif c.wait_until_us is not None and c.wait_until_us <= now:
                s._stop_waiting(c)
                s._wake(c, C.Reply("TIMED_OUT"))
        if c.id in s.conns:
            s._retime_conn(c)


@cython.locals(best=Tube, t=Tube, c=ConnState, j=Job)
def _serve(s: EngineState) -> None:
    """Give ready jobs to waiting connections (beanstalkd's ``process_queue``)."""
    now, dirty = s._now, s._dirty
    while dirty:
        best: Tube | None = None
        best_key = 0
        for t in list(dirty):
            if not t.waiting or not t.ready or t.is_paused(now):
                dirty.discard(t)
                continue
            k = t.ready.peek_key()
            assert k is not None
            if best is None or k < best_key:
                best, best_key = t, k
        if best is None:
            return
        j = best.ready.pop()
        if j.pri < URGENT_THRESHOLD:
            best.urgent -= 1
        c = next(iter(best.waiting.values()))
        s._stop_waiting(c)
        s._give(c, j)
        s._wake(c, C.JobReply("RESERVED", j.id, job_body(j)))


# Whether a timer heap's first item is due at ``now``: the instant its key was packed from (a
# tube's or connection's timer_at, a job's deadline_us) is at or before it. Read from the item,
# so no key is unpacked and no bound packed (compiled: C functions, timers.pxd; the instants
# compared by the heap's own ``_lt``, in C for ints, as every step asks several times).


def _tube_due(h: IndexedHeap, now: int) -> bool:
    t: Tube | None = h.peek()
    return t is not None and not _lt(now, t.timer_at)


def _conn_due(h: IndexedHeap, now: int) -> bool:
    c: ConnState | None = h.peek()
    return c is not None and not _lt(now, c.timer_at)


def _job_due(h: IndexedHeap, now: int) -> bool:
    j: Job | None = h.peek()
    return j is not None and not _lt(now, j.deadline_us)
