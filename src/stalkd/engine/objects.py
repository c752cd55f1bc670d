"""The engine's in-memory objects: a job, a tube and a connection as the engine sees it. They
point at one another (a job at its tube and owner, a tube at its jobs and waiting connections,
a connection at its tubes and reserved jobs), so they share one module. The persisted form of
a job is ``model.Record``.

Ensures:
  * a job's ``state`` says which container holds it: READY -> its tube's ready heap, DELAYED ->
    its tube's delay heap, RESERVED -> its owner connection's reserved heap, BURIED -> its
    tube's buried FIFO. ``deadline_us`` means: the delay deadline (DELAYED), the TTR deadline
    (RESERVED), the bury sequence number that orders the buried FIFO across restarts (BURIED),
    0 (READY);
  * every job in a tube's ``ready`` is READY and keyed ``pack(pri, id)``; every job in
    ``delayed`` is DELAYED and keyed ``pack(deadline_us, id)``; ``buried`` holds BURIED jobs
    oldest first; ``urgent`` counts READY jobs with pri < 1024; ``waiting`` holds connections
    blocked in reserve that watch this tube, in arrival order;
  * a connection's ``reserved`` holds exactly the RESERVED jobs whose ``owner`` is this
    connection, keyed ``pack(deadline_us, id)`` so the soonest TTR is on top; ``waiting`` is
    True exactly when the connection is in the ``waiting`` map of every tube it watches;
  * a job's body is ``job_body(j)`` (``j.body``), ``j.blen`` bytes long; a recovered job may
    still hold it as a slice of a buffer it was read from (``new_lazy_job``) until it is read;
  * a connection that hung up while holding more jobs and watched tubes than one step may let
    go keeps them in ``reserved`` and ``watch`` with ``release`` set (``Release``) until they
    are all back in ready and unwatched; it is no longer one of the engine's connections and
    has no timer, so those jobs never time out.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, TypeVar

from stalkd.engine.heap import HeapItem, IndexedHeap
from stalkd.engine.model import JobState

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = [
    "Job", "job_body", "new_job", "new_lazy_job", "Tube", "ConnState", "Release", "URGENT_THRESHOLD", "US",
    "SAFETY_MARGIN_US", "time_left", "to_us", "remove_swap_last",
]  # fmt: skip

URGENT_THRESHOLD = 1024  # beanstalkd: a ready job with pri < 1024 is "urgent"
US = 1_000_000


# no_gc: compiled, the cycle collector does not track jobs. A young collection walked every new
# job and a middle one walked it again (8.6 % of a primary's CPU taking pipelined puts, perf), and
# the timed full collection walked the whole queue. A job's only references that can close a
# cycle are its tube and its owner, whose heaps hold it: EngineState.__del__ cuts them when the
# engine goes. (In this order: Cython takes no_gc only on a class cclass has made an extension type.)
@cython.no_gc
@cython.cclass
class Job(HeapItem):
    """One job. Mutable on purpose: a million of these live in memory, so ``__slots__`` and no
    per-transition copies (compiled, an extension type: objects.pxd). Its body is ``bdata``, or,
    while ``bat >= 0``, the ``blen`` bytes of ``bdata`` from ``bat`` (``new_lazy_job``); read it
    as ``job_body(j)`` or ``j.body``.

    ``Job(...)`` and ``new_job(...)`` take the same arguments and make the same job; the engine
    calls ``new_job``, which compiled is a C call (a type call with arguments is a Python call
    that parses them), and both set the fields in ``_init_job``.

    >>> j = Job(1, Tube("default", 1), 10, 0, 60, b"hi", JobState.READY, 0)
    >>> j.state.name, j.ttr
    ('READY', 60)
    """

    __slots__ = (
        "id", "tube", "pri", "delay", "ttr", "bdata", "bat", "blen", "state", "created_us", "deadline_us",
        "reserves", "timeouts", "releases", "buries", "kicks", "owner",
    )  # fmt: skip

    id: int
    tube: Tube
    pri: int
    delay: int
    ttr: int
    bdata: bytes  # the body (bat < 0), or a buffer the body is a slice of (see ``job_body``)
    bat: int
    blen: int  # the body's length, either way
    state: JobState
    created_us: int
    deadline_us: int
    reserves: int
    timeouts: int
    releases: int
    buries: int
    kicks: int
    owner: ConnState | None

    def __init__(
        self,
        id: int,
        tube: Tube,
        pri: int,
        delay: int,
        ttr: int,
        body: bytes,
        state: JobState,
        created_us: int,
    ) -> None:
        _init_job(self, id, tube, pri, delay, ttr, body, -1, len(body), state, created_us)

    def __repr__(self) -> str:
        return f"Job(id={self.id}, tube={self.tube.name!r}, state={self.state.name}, pri={self.pri})"

    @property
    def body(self) -> bytes:
        """The body (made a ``bytes`` of its own first if it is still a slice of a buffer)."""
        return job_body(self)

    @body.setter
    def body(self, body: bytes) -> None:
        self.bdata = body
        self.bat = -1
        self.blen = len(body)


@cython.cfunc
@cython.inline
@cython.locals(j=Job, at=cython.Py_ssize_t, n=cython.Py_ssize_t)
def _init_job(
    j: Job, id: int, tube: Tube, pri: int, delay: int, ttr: int, data: bytes, at: int, n: int, state: JobState,
    created_us: int,
) -> None:  # fmt: skip
    """A new job's fields: the given ones (its body ``data``, or ``n`` bytes of it from ``at``:
    ``job_body``), and the rest as a job starts (in no heap, no owner). Called from two places
    (``Job.__init__``, ``_new_job``), so that GCC inlines it (with a third caller it called it
    instead: ~50 instructions more per job made, callgrind)."""
    j.id = id
    j.tube = tube
    j.pri = pri
    j.delay = delay
    j.ttr = ttr
    j.bdata = data
    j.bat = at
    j.blen = n
    j.state = state
    j.created_us = created_us
    j.deadline_us = 0
    j.reserves = 0
    j.timeouts = 0
    j.releases = 0
    j.buries = 0
    j.kicks = 0
    j.hpos = -1
    j.owner = None


@cython.cfunc
@cython.locals(j=Job, at=cython.Py_ssize_t, n=cython.Py_ssize_t)
def _new_job(
    id: int, tube: Tube, pri: int, delay: int, ttr: int, data: bytes, at: int, n: int, state: JobState,
    created_us: int,
) -> Job:  # fmt: skip
    """A new job (see ``_init_job``), allocated at C level when compiled."""
    j = Job.__new__(Job)
    _init_job(j, id, tube, pri, delay, ttr, data, at, n, state, created_us)
    return j


def new_job(
    id: int, tube: Tube, pri: int, delay: int, ttr: int, body: bytes, state: JobState, created_us: int,
) -> Job:  # fmt: skip
    """``Job(id, tube, ...)``, built at C level when compiled: an allocation and field stores.

    >>> new_job(3, Tube("t", 1), 0, 0, 60, b"", JobState.READY, 0).hpos
    -1
    """
    return _new_job(id, tube, pri, delay, ttr, body, -1, len(body), state, created_us)


def new_lazy_job(
    id: int, tube: Tube, pri: int, delay: int, ttr: int, data: bytes, at: int, n: int, state: JobState,
    created_us: int,
) -> Job:  # fmt: skip
    """``new_job`` with the body ``data[at : at + n]`` left in ``data`` until it is first read
    (``job_body``): recovery builds a million jobs whose bodies mostly wait to be reserved, one
    object fewer each. ``data`` (a snapshot block's bodies, a WAL window) lives while any of its
    jobs still holds it this way.

    >>> j = new_lazy_job(3, Tube("t", 1), 0, 0, 60, b"abcdef", 2, 3, JobState.READY, 0)
    >>> j.blen, j.bat, j.body, j.bat
    (3, 2, b'cde', -1)
    """
    if not 0 <= at <= at + n <= len(data):
        raise ValueError(f"body [{at}, {at + n}) outside the {len(data)} bytes given")
    return _new_job(id, tube, pri, delay, ttr, data, at, n, state, created_us)


@cython.locals(j=Job, at=cython.Py_ssize_t, data=bytes)
def job_body(j: Job) -> bytes:
    """``j``'s body: a lazily held one (``new_lazy_job``) is cut out of its buffer now and kept,
    so the buffer is let go once none of its jobs holds it any more. The engine reads a body
    only here (compiled, a C call), or through ``Job.body``, which calls this.

    >>> j = new_lazy_job(3, Tube("t", 1), 0, 0, 60, b"abc", 1, 1, JobState.READY, 0); job_body(j)
    b'b'
    """
    at = j.bat
    if at < 0:
        return j.bdata
    data = j.bdata  # compiled: bytes (new_lazy_job takes no other), so the cut below is one copy
    body = data[at : at + j.blen]
    j.bdata = body
    j.bat = -1
    return body


# Compiled, C constants: US as a double, and the magnitude below which a double holds every
# integer exactly.
_US_F = cython.declare(cython.double, US)
_EXACT = cython.declare(cython.double, 2.0**53)


@cython.locals(x=cython.double, n=cython.longlong, r=cython.double)
def to_us(now: float) -> int:
    """``round(now * US)``: seconds as whole microseconds, a tie to the even one as ``round``
    does. Compiled, C arithmetic on a double, where ``round`` is a Python call (a method look-up
    on the float and a bound method); the engine converts each step's time with it.

    >>> to_us(1.5), to_us(0.0000005), to_us(0.0000015), to_us(-0.0000025), to_us(7)
    (1500000, 0, 2, -2, 7000000)
    """
    x = now
    x = x * _US_F  # now * US: the same double product
    if not -_EXACT < x < _EXACT:  # past 2**53 (and inf, nan): round itself answers or raises
        return round(now * US)
    n = int(x)  # toward zero
    r = x - n
    if r > 0.5 or (r == 0.5 and n % 2):
        n += 1
    elif r < -0.5 or (r == -0.5 and n % 2):
        n -= 1
    return n


def time_left(deadline_us: int, now_us: int) -> int:
    """Whole seconds until ``deadline_us``, truncated toward zero (as beanstalkd's integer division).

    >>> time_left(10_500_000, 1_000_000), time_left(0, 1_500_000)
    (9, -1)
    """
    d = deadline_us - now_us
    return d // US if d >= 0 else -((-d) // US)


T = TypeVar("T")


class Tube(HeapItem):
    """One tube. ``serial`` is its creation number (a tie-breaker in the engine's timer heap).

    >>> t = Tube("default", 1)
    >>> t.name, len(t.ready), t.is_paused(0)
    ('default', 0, False)
    """

    __slots__ = (
        "name", "serial", "ready", "delayed", "buried", "waiting", "pause_until_us",
        "pause_secs", "using", "watching", "total_jobs", "cmd_delete", "cmd_pause",
        "urgent", "reserved", "slot", "timer_at",
    )  # fmt: skip

    def __init__(self, name: str, serial: int) -> None:
        self.name = name
        self.serial = serial
        self.ready: IndexedHeap = IndexedHeap()
        self.delayed: IndexedHeap = IndexedHeap()
        self.buried: OrderedDict[int, Job] = OrderedDict()
        self.waiting: OrderedDict[int, ConnState] = OrderedDict()
        self.pause_until_us = 0  # paused while now < pause_until_us
        self.pause_secs = 0
        self.using = 0
        self.watching = 0
        self.total_jobs = 0
        self.cmd_delete = 0
        self.cmd_pause = 0
        self.urgent = 0
        self.reserved = 0
        self.hpos = -1  # position in the engine's tube-timer heap
        self.timer_at = 0  # while in that heap, the instant its key was made of
        self.slot = -1  # position in the engine's creation-ordered tube list

    def __repr__(self) -> str:
        return f"Tube({self.name!r})"

    def is_paused(self, now_us: int) -> bool:
        return now_us < self.pause_until_us

    def job_count(self) -> int:
        return len(self.ready) + len(self.delayed) + len(self.buried) + self.reserved

    def unreferenced(self) -> bool:
        """True when beanstalkd would free the tube: no jobs, no user, no watcher."""
        return self.using == 0 and self.watching == 0 and self.job_count() == 0

    def timer_us(self) -> int | None:
        """The next instant this tube needs the engine's attention (delay expiry or pause end)."""
        top = self.delayed.peek()
        t = top.deadline_us if top is not None else None
        if self.pause_until_us:
            t = self.pause_until_us if t is None else min(t, self.pause_until_us)
        return t


def remove_swap_last(items: list[T], i: int) -> None:
    """Remove ``items[i]`` by moving the last item into its slot: beanstalkd's list order rule
    for list-tubes and list-tubes-watched.

    >>> xs = ["default", "a", "b", "c"]; remove_swap_last(xs, 1); xs
    ['default', 'c', 'b']
    """
    last = items.pop()
    if i < len(items):
        items[i] = last


SAFETY_MARGIN_US = 1_000_000  # DEADLINE_SOON fires one second before a reserved job's TTR ends


class ConnState(HeapItem):
    """One connection.

    >>> c = ConnState(7, Tube("default", 1)); c.watch[0].name, c.waiting
    ('default', False)
    """

    __slots__ = (
        "id", "use", "watch", "reserved", "waiting", "wait_until_us", "wait_seq",
        "producer", "worker", "half_closed", "kick", "release", "timer_at",
    )  # fmt: skip

    def __init__(self, conn_id: int, default: Tube) -> None:
        self.id = conn_id
        self.use = default
        self.watch: list[Tube] = [default]
        self.reserved: IndexedHeap = IndexedHeap()
        self.waiting = False
        self.wait_until_us: int | None = None  # reserve-with-timeout deadline; None = forever
        self.wait_seq = 0
        self.producer = False
        self.worker = False
        self.half_closed = False
        self.hpos = -1  # position in the engine's connection-timer heap
        self.timer_at = 0  # while in that heap, the instant its key was made of
        # A kick in progress, done a step at a time: [tube, buried?, jobs left, jobs kicked].
        self.kick: list[Any] | None = None
        # Set once the connection is gone while its reserved jobs go back to ready in steps.
        self.release: Release | None = None

    def __repr__(self) -> str:
        return f"ConnState({self.id})"

    def soonest_deadline(self) -> int | None:
        top = self.reserved.peek()
        return top.deadline_us if top is not None else None

    def deadline_soon(self, now_us: int) -> bool:
        """beanstalkd's ``conndeadlinesoon``: a reserved job is within the 1 s safety margin."""
        d = self.soonest_deadline()
        return d is not None and now_us >= d - SAFETY_MARGIN_US

    def timer_us(self) -> int | None:
        """When this connection next needs attention: a TTR expiry, or, while waiting, the
        reserve timeout or the start of the safety margin (beanstalkd's ``connsched``)."""
        d = self.soonest_deadline()
        t = d
        if self.waiting:
            if d is not None:
                t = d - SAFETY_MARGIN_US
            if self.wait_until_us is not None:
                t = self.wait_until_us if t is None else min(t, self.wait_until_us)
        return t


class Release:
    """A gone connection's reserved jobs on their way back to ready, most urgent first.

    Ordering them by (pri, id) is itself work that grows with the jobs, so it is done in steps
    too: first each job's ready key is pushed on ``keys`` (a ``heapq`` of ``pack(pri, id)``),
    ``held`` being a copy of the reserved heap's items taken at the hang-up and ``at`` how far
    that got; then the keys are popped in order. A key whose job no longer belongs to the
    connection (deleted, or handed back early, ``EngineState._release_held``) is skipped.
    Then the tubes it watched are let go, in watch order.
    """

    __slots__ = ("held", "at", "keys")

    def __init__(self, held: list[Job]) -> None:
        self.held: list[Job] | None = held  # None once every key is collected
        self.at = 0
        self.keys: list[int] = []
