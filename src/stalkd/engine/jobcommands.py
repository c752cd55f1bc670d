"""The commands that change one job: put, reserve (and with a timeout), reserve-job, delete,
release, bury, touch, kick and kick-job (beanstalkd's semantics; see docs/protocol.md).

Each handler finds its job with the look-up its command-table row names (``room.py``), so a
server's WAL admission runs the very same look-up first. A kick moves at most the step's budget of
jobs (``step_jobs``, shared with expiring timers, timers.py) and goes on in ``tick()``, so no
step grows with the number of jobs.

Ensures: every change that must survive a restart appends its record (``_rec``/``_rec_fields``)
in the order the changes happened; a handler that replies NOT_FOUND changed nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stalkd.engine.heap import pack
from stalkd.engine.model import JobState, Op
from stalkd.engine.objects import URGENT_THRESHOLD, US, ConnState, Job, Tube, new_job
from stalkd.engine.room import find_deletable, find_held, find_kickable, find_unreserved
from stalkd.engine.timers import Timers
from stalkd.protocol import commands as C

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["JobCommands"]

READY = JobState.READY
_NOT_FOUND = C.Reply("NOT_FOUND")
# Replies without per-command values are immutable, so one instance each serves every command.
_DELETED, _RELEASED, _BURIED, _TOUCHED = C.Reply("DELETED"), C.Reply("RELEASED"), C.Reply("BURIED"), C.Reply("TOUCHED")
_KICKED = C.Reply("KICKED")
_OP_PUT, _OP_DELETE = Op.PUT, Op.DELETE


class JobCommands(Timers):
    """The job-changing commands (a layer of ``Engine``, engine.py)."""

    @cython.locals(c=ConnState, t=Tube, j=Job, cmd=C.Put, err=str)  # err: compiled, None == "..." is C
    def _put(self, c: ConnState, cmd: C.Put) -> C.AnyReply:
        err = cmd.error
        body = cmd.body
        if err is not None or len(body) > self.max_job_size:  # the parser's error, or too big
            if err == "JOB_TOO_BIG" or len(body) > self.max_job_size:  # beanstalkd checks size first
                return C.Reply("JOB_TOO_BIG")
            if err == "BAD_FORMAT":  # text after the size: beanstalkd checks it after counting
                return C.Reply("BAD_FORMAT")
            c.producer = True  # as beanstalkd: only once the size check has passed
            self.next_id += 1  # EXPECTED_CRLF: beanstalkd allocates the id before reading the body
            return C.Reply("EXPECTED_CRLF")
        c.producer = True
        if self.draining:
            self.next_id += 1
            return C.Reply("DRAINING")
        jid = self.next_id
        self.next_id += 1
        t = c.use
        ttr = cmd.ttr
        delay = cmd.delay
        j = new_job(jid, t, cmd.pri, delay, ttr if ttr > 1 else 1, body, READY, self._now)
        self.jobs[jid] = j
        self.body_bytes += len(body)
        t.total_jobs += 1
        self.total_jobs += 1
        if delay > 0:
            self._to_delayed(j, delay)
        else:
            self._to_ready(j)
        self._rec_fields(_OP_PUT, jid, t.name, j.pri, j.delay, j.ttr, j.deadline_us, j.body, self._now)
        return C.Reply("INSERTED", (jid,))

    @cython.locals(c=ConnState, best=Tube, t=Tube, j=Job)
    def _reserve(self, c: ConnState, cmd: C.Reserve | C.ReserveWithTimeout) -> C.AnyReply | None:
        timeout = cython.cast(C.ReserveWithTimeout, cmd).timeout if type(cmd) is C.ReserveWithTimeout else None
        c.worker = True
        # Fast path: an unpaused watched tube with a ready job has no waiters (invariant), so
        # the best such job goes straight to this connection.
        best: Tube | None = None
        best_key = 0
        now = self._now
        for t in c.watch:
            k = t.ready.peek_key()
            if k is not None and (best is None or k < best_key) and now >= t.pause_until_us:  # not paused
                best, best_key = t, k
        if best is not None:
            j = best.ready.pop()
            if j.pri < URGENT_THRESHOLD:
                best.urgent -= 1
            self._give(c, j)
            return C.JobReply("RESERVED", j.id, j.body)
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

    _reserve_with_timeout = _reserve

    @cython.locals(cmd=C.ReserveJob)
    def _reserve_job(self, c: ConnState, cmd: C.ReserveJob) -> C.AnyReply:
        j = find_unreserved(self.jobs, c, cmd.id)
        if j is None:
            return _NOT_FOUND
        c.worker = True  # as beanstalkd: a reserve-job that finds nothing does not make a worker
        self._detach(j)
        self._give(c, j)
        return C.JobReply("RESERVED", j.id, j.body)

    @cython.locals(c=ConnState, t=Tube, j=Job, cmd=C.Delete)
    def _delete(self, c: ConnState, cmd: C.Delete) -> C.AnyReply:
        j = find_deletable(self.jobs, c, cmd.id)
        if j is None:
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

    @cython.locals(c=ConnState, j=Job, cmd=C.Release)
    def _release(self, c: ConnState, cmd: C.Release) -> C.AnyReply:
        j = find_held(self.jobs, c, cmd.id)
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
        self._rec_fields(Op.RELEASE, j.id, tube="", pri=j.pri, delay=j.delay, ttr=0, deadline_us=j.deadline_us)
        return _RELEASED

    @cython.locals(c=ConnState, j=Job, cmd=C.Bury)
    def _bury(self, c: ConnState, cmd: C.Bury) -> C.AnyReply:
        j = find_held(self.jobs, c, cmd.id)
        if j is None:
            return _NOT_FOUND
        self._detach(j)
        j.pri = cmd.pri
        j.buries += 1
        self._rec_fields(Op.BURY, j.id, tube="", pri=j.pri)
        self._to_buried(j, self.seq)
        return _BURIED

    @cython.locals(c=ConnState, j=Job, cmd=C.Touch)
    def _touch(self, c: ConnState, cmd: C.Touch) -> C.AnyReply:
        j = find_held(self.jobs, c, cmd.id)
        if j is None:
            return _NOT_FOUND
        j.deadline_us = self._now + j.ttr * US
        c.reserved.update(j, pack(j.deadline_us, j.id))
        self._retime_conn(c)
        self._rec(Op.TOUCH, j.id)
        return _TOUCHED

    def _kick_one(self, j: Job) -> None:
        self._detach(j)
        j.kicks += 1
        self._to_ready(j)
        self._rec(Op.KICK, j.id)

    @cython.locals(cmd=C.Kick)
    def _kick(self, c: ConnState, cmd: C.Kick) -> C.AnyReply | None:
        # beanstalkd: any buried job means only buried jobs are kicked (oldest first), else
        # delayed ones (soonest deadline first). A kick moves jobs out of the step's budget
        # (timers.py); a longer one goes on in tick() and its reply comes as a wakeup.
        # As the kicking client sees it the kick is still one command: it may send nothing
        # until its reply (apply refuses), and the reply counts exactly the jobs this kick
        # moved, at most ``bound``. Others are served between the steps and may see part of
        # it done; jobs they bury or delay meanwhile in the tube may be kicked by it too, as
        # if they had come just before a kick beanstalkd runs in one go.
        t = c.use
        c.kick = [t, bool(t.buried), cmd.bound, 0]
        if self._kick_step(c):
            return self._kicked(c)
        self._pending.append(c)
        return None

    def _kicked(self, c: ConnState) -> C.AnyReply:
        assert c.kick is not None
        n = c.kick[3]
        c.kick = None
        return C.Reply("KICKED", (n,))

    def _kick_step(self, c: ConnState) -> bool:
        """Kick what the step's budget allows of ``c``'s kick; True when the kick is over."""
        assert c.kick is not None
        t, buried, left, done = c.kick
        jobs = t.buried if buried else t.delayed
        want = min(left, self._budget, len(jobs))
        room = self._room
        n = want if room is None or not want else room.updates(want)
        if buried:
            for _ in range(n):
                self._kick_one(next(iter(t.buried.values())))
        else:
            delayed = t.delayed
            for _ in range(n):
                self._kick_one(delayed.peek())
        self._budget -= n
        left -= n
        c.kick = [t, buried, left, done + n]
        return n < want or not left or not jobs  # n < want: the disk has no room for more

    def _more(self) -> None:
        """One step of the oldest work in progress (a kick, or a hang-up's jobs going back)."""
        c = self._pending.popleft()
        if c.kick is not None:
            if self._kick_step(c):
                self._wake(c, self._kicked(c))
                return
        elif self._release_step(c):
            return
        self._pending.append(c)

    @cython.locals(cmd=C.KickJob)
    def _kick_job(self, c: ConnState, cmd: C.KickJob) -> C.AnyReply:
        j = find_kickable(self.jobs, c, cmd.id)
        if j is None:
            return _NOT_FOUND
        self._kick_one(j)
        return _KICKED

