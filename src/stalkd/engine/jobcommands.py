"""The commands that change one job: put, reserve (and with a timeout), reserve-job, delete,
release, bury, touch, kick and kick-job (beanstalkd's semantics; see docs/protocol.md).

Each handler is a function over the engine's state ``s`` (state.py) and the calling
connection, found by its command's name for ``Engine.apply``'s dispatch (engine.py). Each finds
its job with the look-up its command-table row names (``room.py``), so a server's WAL admission
runs the very same look-up first. A kick moves at most the step's budget of jobs
(``step_jobs``, shared with expiring timers, timers.py) and goes on in ``Engine.tick``
(``more``), so no step grows with the number of jobs.

Ensures: every change that must survive a restart appends its record (``_rec``/``_rec_fields``)
in the order the changes happened; a handler that replies NOT_FOUND changed nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stalkd.engine.heap import pack
from stalkd.engine.model import JobState, Op
from stalkd.engine.objects import URGENT_THRESHOLD, US, ConnState, Job, Tube, job_body, new_job
from stalkd.engine.room import find_deletable, find_held, find_kickable, find_unreserved
from stalkd.engine.state import EngineState
from stalkd.protocol import commands as C

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["bury", "delete", "kick", "kick_job", "more", "put", "release", "reserve", "reserve_job",
           "reserve_with_timeout", "touch"]

READY = JobState.READY
_NOT_FOUND = C.Reply("NOT_FOUND")
# Replies without per-command values are immutable, so one instance each serves every command.
_DELETED, _RELEASED, _BURIED, _TOUCHED = C.Reply("DELETED"), C.Reply("RELEASED"), C.Reply("BURIED"), C.Reply("TOUCHED")
_KICKED = C.Reply("KICKED")
_OP_PUT, _OP_DELETE = Op.PUT, Op.DELETE


@cython.locals(t=Tube, j=Job, err=str)  # err: compiled, None == "..." is C
def put(s: EngineState, c: ConnState, cmd: C.Put) -> C.AnyReply:
    err = cmd.error
    body = cmd.body
    if err is not None or len(body) > s.max_job_size:  # the parser's error, or too big
        if err == "JOB_TOO_BIG" or len(body) > s.max_job_size:  # beanstalkd checks size first
            return C.Reply("JOB_TOO_BIG")
        if err == "BAD_FORMAT":  # text after the size: beanstalkd checks it after counting
            return C.Reply("BAD_FORMAT")
        c.producer = True  # as beanstalkd: only once the size check has passed
        s.next_id += 1  # EXPECTED_CRLF: beanstalkd allocates the id before reading the body
        return C.Reply("EXPECTED_CRLF")
    c.producer = True
    if s.draining:
        s.next_id += 1
        return C.Reply("DRAINING")
    jid = s.next_id
    s.next_id += 1
    t = c.use
    ttr = cmd.ttr
    delay = cmd.delay
    j = new_job(jid, t, cmd.pri, delay, ttr if ttr > 1 else 1, body, READY, s._now)
    s.jobs[jid] = j
    s.body_bytes += len(body)
    t.total_jobs += 1
    s.total_jobs += 1
    if delay > 0:
        s._to_delayed(j, delay)
    else:
        s._to_ready(j)
    s._rec_fields(_OP_PUT, jid, t.name, j.pri, j.delay, j.ttr, j.deadline_us, body, s._now)
    return C.new_reply("INSERTED", (jid,))  # compiled, a C call (commands.pxd)


@cython.locals(best=Tube, t=Tube, j=Job)
def reserve(s: EngineState, c: ConnState, cmd: C.Reserve | C.ReserveWithTimeout) -> C.AnyReply | None:
    timeout = cython.cast(C.ReserveWithTimeout, cmd).timeout if type(cmd) is C.ReserveWithTimeout else None
    c.worker = True
    # Fast path: an unpaused watched tube with a ready job has no waiters (invariant), so
    # the best such job goes straight to this connection.
    best: Tube | None = None
    best_key = 0
    now = s._now
    for t in c.watch:
        k = t.ready.peek_key()
        if k is not None and (best is None or k < best_key) and now >= t.pause_until_us:  # not paused
            best, best_key = t, k
    if best is not None:
        j = best.ready.pop()
        if j.pri < URGENT_THRESHOLD:
            best.urgent -= 1
        s._give(c, j)
        return C.JobReply("RESERVED", j.id, job_body(j))
    if c.deadline_soon(now) and not _any_ready(c.watch):
        return C.Reply("DEADLINE_SOON")
    if c.half_closed:
        timeout = 0
    c.waiting = True
    c.wait_until_us = None if timeout is None else s._now + timeout * US
    s._wait_serial += 1
    c.wait_seq = s._wait_serial
    for t in c.watch:
        t.waiting[c.id] = c
        s._dirty.add(t)
    s._retime_conn(c)
    return None


reserve_with_timeout = reserve


def _any_ready(watch: list[Tube]) -> bool:
    """Whether a tube of ``watch`` has a ready job, paused or not (a C function when compiled:
    ``reserve``, a cpdef function, may hold no generator of its own)."""
    return any(t.ready for t in watch)


def reserve_job(s: EngineState, c: ConnState, cmd: C.ReserveJob) -> C.AnyReply:
    j = find_unreserved(s.jobs, c, cmd.id)
    if j is None:
        return _NOT_FOUND
    c.worker = True  # as beanstalkd: a reserve-job that finds nothing does not make a worker
    s._detach(j)
    s._give(c, j)
    return C.JobReply("RESERVED", j.id, job_body(j))


@cython.locals(t=Tube, j=Job)
def delete(s: EngineState, c: ConnState, cmd: C.Delete) -> C.AnyReply:
    j = find_deletable(s.jobs, c, cmd.id)
    if j is None:
        return _NOT_FOUND
    s._detach(j)
    del s.jobs[j.id]
    s.body_bytes -= j.blen
    j.tube.cmd_delete += 1
    s._rec(_OP_DELETE, j.id)
    t = j.tube
    if not t.using and not t.watching:  # else it cannot be dropped: skip the call
        s._maybe_drop_tube(t)
    return _DELETED


@cython.locals(j=Job)
def release(s: EngineState, c: ConnState, cmd: C.Release) -> C.AnyReply:
    j = find_held(s.jobs, c, cmd.id)
    if j is None:
        return _NOT_FOUND
    s._detach(j)
    j.pri = cmd.pri
    j.delay = cmd.delay
    j.releases += 1
    if cmd.delay > 0:
        s._to_delayed(j, cmd.delay)
    else:
        s._to_ready(j)
    s._rec_fields(Op.RELEASE, j.id, tube="", pri=j.pri, delay=j.delay, ttr=0, deadline_us=j.deadline_us)
    return _RELEASED


@cython.locals(j=Job)
def bury(s: EngineState, c: ConnState, cmd: C.Bury) -> C.AnyReply:
    j = find_held(s.jobs, c, cmd.id)
    if j is None:
        return _NOT_FOUND
    s._detach(j)
    j.pri = cmd.pri
    j.buries += 1
    s._rec_fields(Op.BURY, j.id, tube="", pri=j.pri)
    s._to_buried(j, s.seq)
    return _BURIED


@cython.locals(j=Job)
def touch(s: EngineState, c: ConnState, cmd: C.Touch) -> C.AnyReply:
    j = find_held(s.jobs, c, cmd.id)
    if j is None:
        return _NOT_FOUND
    j.deadline_us = s._now + j.ttr * US
    c.reserved.update(j, pack(j.deadline_us, j.id))
    s._retime_conn(c)
    s._rec(Op.TOUCH, j.id)
    return _TOUCHED


def _kick_one(s: EngineState, j: Job) -> None:
    s._detach(j)
    j.kicks += 1
    s._to_ready(j)
    s._rec(Op.KICK, j.id)


def kick(s: EngineState, c: ConnState, cmd: C.Kick) -> C.AnyReply | None:
    # beanstalkd: any buried job means only buried jobs are kicked (oldest first), else
    # delayed ones (soonest deadline first). A kick moves jobs out of the step's budget
    # (timers.py); a longer one goes on in ``more`` and its reply comes as a wakeup.
    # As the kicking client sees it the kick is still one command: it may send nothing
    # until its reply (apply refuses), and the reply counts exactly the jobs this kick
    # moved, at most ``bound``. Others are served between the steps and may see part of
    # it done; jobs they bury or delay meanwhile in the tube may be kicked by it too, as
    # if they had come just before a kick beanstalkd runs in one go.
    t = c.use
    c.kick = [t, bool(t.buried), cmd.bound, 0]
    if _kick_step(s, c):
        return _kicked(c)
    s._pending.append(c)
    return None


def _kicked(c: ConnState) -> C.AnyReply:
    assert c.kick is not None
    n = c.kick[3]
    c.kick = None
    return C.Reply("KICKED", (n,))


def _kick_step(s: EngineState, c: ConnState) -> bool:
    """Kick what the step's budget allows of ``c``'s kick; True when the kick is over."""
    assert c.kick is not None
    t, buried, left, done = c.kick
    jobs = t.buried if buried else t.delayed
    want = min(left, s._budget, len(jobs))
    room = s._room
    n = want if room is None or not want else room.updates(want)
    if buried:
        for _ in range(n):
            _kick_one(s, next(iter(t.buried.values())))
    else:
        delayed = t.delayed
        for _ in range(n):
            _kick_one(s, delayed.peek())
    s._budget -= n
    left -= n
    c.kick = [t, buried, left, done + n]
    return n < want or not left or not jobs  # n < want: the disk has no room for more


def more(s: EngineState) -> None:
    """One step of the oldest work in progress (a kick, or a hang-up's jobs going back)."""
    c = s._pending.popleft()
    if c.kick is not None:
        if _kick_step(s, c):
            s._wake(c, _kicked(c))
            return
    elif s._release_step(c):
        return
    s._pending.append(c)


def kick_job(s: EngineState, c: ConnState, cmd: C.KickJob) -> C.AnyReply:
    j = find_kickable(s.jobs, c, cmd.id)
    if j is None:
        return _NOT_FOUND
    _kick_one(s, j)
    return _KICKED

