"""Time in the engine: running due timers, serving waiting reservers, and the step frame.

Every public engine call is a *step*: ``_begin(now)`` runs the timers due at ``now``,
the command runs, ``_finish`` runs them again and serves waiters, and the step's replies,
records and next deadline leave as one ``Outcome``. Timers are delay expiry and pause end
(tube timer heap), TTR expiry, DEADLINE_SOON's safety margin and reserve-with-timeout
(connection timer heap); ``tick(now)`` is a step with no command.

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
from stalkd.engine.objects import URGENT_THRESHOLD, US, ConnState, Job, Tube, to_us
from stalkd.engine.state import EngineState, Outcome
from stalkd.protocol import commands as C

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Timers"]

class Timers(EngineState):
    """The step frame and the timers (a layer of ``Engine``, engine.py)."""

    def tick(self, now: float) -> Outcome:
        """Run the timers due at ``now`` and one step of a kick or a hang-up in progress,
        moving at most ``step_jobs`` jobs; ``next_deadline`` says when to call again (``now``
        or earlier while work is left)."""
        self._begin(now, None)
        if self._pending:
            self._more()
        return self._finish(None)

    def _more(self) -> None:
        raise NotImplementedError  # Engine's

    def behind(self) -> bool:
        """Whether the last step left work for the next one (a kick, a hang-up's jobs, or jobs
        still due)."""
        if self._pending:
            return True
        return _tube_due(self._tube_timers, self._now) or _conn_due(self._conn_timers, self._now)

    @cython.locals(t=Tube, c=ConnState)
    def next_deadline(self) -> float | None:
        """Absolute time (seconds) of the next timer, or None."""
        if self._pending:
            return self._now / US  # a kick or a hang-up goes on: call tick again at once
        # The soonest tube and connection: their instants are in timer_at (no key shifted back).
        t = self._tube_timers.peek()
        c = self._conn_timers.peek()
        a = None if t is None else t.timer_at
        b = None if c is None else c.timer_at
        k = b if a is None else a if b is None else min(a, b)
        return None if k is None else k / US

    # --- step plumbing ------------------------------------------------------------------------

    def _begin(self, now: float, caller: ConnState | None) -> None:
        if now != self._clock:  # the commands of one read share their time: convert it once
            self._clock = now
            self._now = to_us(now)
        self._budget = self.step_jobs
        # a step starts with empty scratch lists (their contents left the last one as tuples;
        # leftovers of a step that raised are dropped); most steps have no wakeups, and an
        # in-memory engine no records, so a list is made only when the last one was used
        if self._records:
            self._records = []
        if self._wakeups:
            self._wakeups = []
        self._caller = caller
        self._own = None
        self._settle()

    @cython.locals(out=Outcome)
    def _finish(self, reply: C.AnyReply | None) -> Outcome:
        self._settle()
        if reply is None:
            reply = self._own
        recs = self._records
        wakes = self._wakeups
        # The one place an Outcome is built. Its fields are set one by one: compiled, that is a
        # C allocation and four struct writes, where a call with arguments would be a Python call.
        out = Outcome.__new__(Outcome)
        out.reply = reply
        out.records = tuple(recs) if recs else ()
        out.wakeups = tuple(wakes) if wakes else ()
        out.next_deadline = self.next_deadline()
        self._caller = None
        return out

    @cython.locals(t=Tube, c=ConnState, j=Job, budget=cython.Py_ssize_t)
    def _settle(self) -> None:
        now = self._now
        budget = self._budget
        th = self._tube_timers
        while budget > 0 and _tube_due(th, now):
            t = th.pop()
            delayed = t.delayed
            while budget > 0 and _job_due(delayed, now):
                self._to_ready(delayed.pop())
                budget -= 1
            if t.pause_until_us and t.pause_until_us <= now:
                t.pause_until_us = 0
                t.pause_secs = 0
                if t.waiting:
                    self._dirty.add(t)
            self._retime_tube(t)  # still due when the budget ran out: the next step goes on
        behind = _tube_due(th, now)
        due: list[ConnState] | None = None  # made when a connection's timer fires: most steps none
        ch = self._conn_timers
        while not behind and _conn_due(ch, now):
            c = ch.pop()
            reserved = c.reserved
            while _job_due(reserved, now):
                if budget <= 0:
                    behind = True
                    break
                j = reserved.pop()
                j.timeouts += 1
                self.job_timeouts += 1
                j.owner = None
                j.tube.reserved -= 1
                self._rec(Op.TIMEOUT, j.id)
                self._to_ready(j)
                budget -= 1
            if due is None:
                due = []
            due.append(c)
        self._budget = budget
        if self._dirty:
            self._serve()
        for c in due or ():
            # Jobs left due may be the job a waiter should get: its timeout waits a step.
            if c.waiting and not behind:
                if c.deadline_soon(now):
                    self._stop_waiting(c)
                    self._wake(c, C.Reply("DEADLINE_SOON"))
                elif c.wait_until_us is not None and c.wait_until_us <= now:
                    self._stop_waiting(c)
                    self._wake(c, C.Reply("TIMED_OUT"))
            if c.id in self.conns:
                self._retime_conn(c)

    @cython.locals(best=Tube, t=Tube, c=ConnState, j=Job)
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
            self._stop_waiting(c)
            self._give(c, j)
            self._wake(c, C.JobReply("RESERVED", j.id, j.body))


# Whether a timer heap's first item is due at ``now``: the instant its key was packed from (a
# tube's or connection's timer_at, a job's deadline_us) is at or before it. Read from the item,
# so no key is unpacked and no bound packed (compiled: C functions, timers.pxd).


def _tube_due(h: IndexedHeap, now: int) -> bool:
    t: Tube | None = h.peek()
    return t is not None and t.timer_at <= now


def _conn_due(h: IndexedHeap, now: int) -> bool:
    c: ConnState | None = h.peek()
    return c is not None and c.timer_at <= now


def _job_due(h: IndexedHeap, now: int) -> bool:
    j: Job | None = h.peek()
    return j is not None and j.deadline_us <= now
