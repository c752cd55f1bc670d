"""WAL room for the engine's durable records, and the job look-ups commands share.

The command table (``protocol.grammar``) names each command's job look-up and WAL cost; the
handlers call the look-ups below, and ``guarded`` puts a handler behind the room check its row
asks for, running the same look-up first, so admission is never a second copy of a handler's
rules: NOT_FOUND wins over OUT_OF_MEMORY as in beanstalkd, which looks the job up before it
reserves log space.

Ensures: a command refused for room changed nothing (except a release to ready, which is
applied without its record: beanstalkd never logs one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from stalkd.engine.jobtable import JobTable
from stalkd.engine.model import JobState, Record
from stalkd.engine.objects import ConnState, Job
from stalkd.protocol import commands as C
from stalkd.protocol.grammar import CommandSpec

__all__ = [
    "Room",
    "RoomBase",
    "OUT_OF_MEMORY",
    "put_refused",
    "Guarded",
    "Handler",
    "guarded",
    "find_held",
    "find_deletable",
    "find_unreserved",
    "find_kickable",
]

RESERVED, BURIED, DELAYED = JobState.RESERVED, JobState.BURIED, JobState.DELAYED
Handler = Callable[[Any, ConnState, Any], C.AnyReply | None]
"""A command's handler: ``handler(state, connection, command)``, the state an ``EngineState``
(state.py), the reply None while the connection waits (engine.py's dispatch)."""
_NOT_FOUND = C.Reply("NOT_FOUND")
OUT_OF_MEMORY = _OUT_OF_MEMORY = C.Reply("OUT_OF_MEMORY")
_RELEASED = C.Reply("RELEASED")


class Room(Protocol):
    """WAL room a command's durable records need, promised before the engine changes anything
    (a server over a bounded disk provides it; see ``Engine.room``)."""

    def put(self, body_len: int) -> bool:
        """Promise room for one put record with a body of ``body_len`` bytes."""
        ...

    def updates(self, n: int) -> int:
        """Promise room for up to ``n`` short update records; how many fit (0..n)."""
        ...


@cython.cclass
class RoomBase:
    """A ``Room`` the compiled engine calls as C functions (room.pxd): the server's admission
    derives from it (any other object with ``put`` and ``updates`` is a Room too, called as
    Python). Without a subclass, it never refuses."""

    def put(self, body_len: int) -> bool:
        """Promise room for one put record with a body of ``body_len`` bytes."""
        return True

    def updates(self, n: int) -> int:
        """Promise room for up to ``n`` short update records; how many fit (0..n)."""
        return n if n > 0 else 0


@cython.locals(n=cython.Py_ssize_t)
def put_refused(room: Room | None, p: C.Put, max_job_size: int, draining: bool) -> bool:
    """Whether a put is refused for room (OUT_OF_MEMORY): a put the engine would run (no
    parse error, not too big, not draining) whose body ``room`` cannot promise."""
    n = len(p.body)
    if p.error is not None or n > max_job_size or draining or room is None:
        return False
    if cython.compiled and isinstance(room, RoomBase):
        return not cython.cast(RoomBase, room).put(n)  # compiled: a C call
    return not room.put(n)


class Guarded(Protocol):
    """What ``guarded`` reads of the engine's state (``EngineState`` is one; a protocol here,
    so this module does not import the state that imports it)."""

    max_job_size: int
    draining: bool
    keep_records: bool
    jobs: JobTable
    _records: list[Record]
    _room: Room | None


def find_held(jobs: JobTable, c: ConnState, job_id: int) -> Job | None:
    """The job, reserved by ``c`` (release, bury, touch)."""
    j = jobs.get(job_id)
    return j if j is not None and j.state is RESERVED and j.owner is c else None


def _held_live(j: Job) -> bool:
    """Reserved by a connection still there (one gone is handing its jobs back: state.py)."""
    return j.state is RESERVED and (j.owner is None or j.owner.release is None)


def find_deletable(jobs: JobTable, c: ConnState, job_id: int) -> Job | None:
    """The job, unless another connection holds it (delete)."""
    j = jobs.get(job_id)
    return None if j is None or (j.owner is not c and _held_live(j)) else j


def find_unreserved(jobs: JobTable, c: ConnState, job_id: int) -> Job | None:
    """The job, unless reserved (reserve-job)."""
    j = jobs.get(job_id)
    return None if j is None or _held_live(j) else j


def find_kickable(jobs: JobTable, c: ConnState, job_id: int) -> Job | None:
    """The job, if buried or delayed (kick-job)."""
    j = jobs.get(job_id)
    return j if j is not None and (j.state is BURIED or j.state is DELAYED) else None


_FINDERS = {"held": find_held, "deletable": find_deletable, "unreserved": find_unreserved,
            "kickable": find_kickable}  # fmt: skip


def guarded(spec: CommandSpec, handler: Handler) -> Handler:
    """``handler`` behind the room check its table row asks for (the room the state holds)."""
    find = None if spec.job is None else _FINDERS[spec.job]
    wal = spec.wal
    if wal is None:
        return handler
    if wal == "put":

        def put(s: Guarded, c: ConnState, cmd: C.Put) -> C.AnyReply | None:
            if put_refused(s._room, cmd, s.max_job_size, s.draining):
                return _OUT_OF_MEMORY
            return handler(s, c, cmd)

        return put
    if wal == "result":

        def result(s: Guarded, c: ConnState, cmd: C.ResultPut) -> C.AnyReply | None:
            room = s._room
            if (cmd.error is None and len(cmd.body) <= s.max_job_size and room is not None
                    and not room.put(len(cmd.body))):  # fmt: skip
                return _OUT_OF_MEMORY
            return handler(s, c, cmd)

        return result
    if wal == "updates":
        return handler  # a kick asks for room a step at a time (jobcommands._kick_step)
    refused = _NOT_FOUND if spec.build is C.KickJob else _OUT_OF_MEMORY

    def update(s: Guarded, c: ConnState, cmd: Any) -> C.AnyReply | None:
        room = s._room
        if find is None or find(s.jobs, c, cmd.id) is None or room is None or room.updates(1):
            return handler(s, c, cmd)
        if type(cmd) is C.Release and cmd.delay == 0:
            reply = handler(s, c, cmd)
            if s.keep_records and reply == _RELEASED:
                s._records.pop()  # its RELEASE record: there is no room to log it
            return reply
        return refused

    return update
