"""The event loop's time shared by the connections, turn by turn: a pure core.

One loop turn serves every connection whose socket became readable. Without a bound, a turn
lasts as long as the sum of what each of them runs: 1,000 clients each pipelining 120
``list-tubes`` make a turn of seconds, and a client whose command needs nothing waits for all
of it. ``Turns`` gives the connections of one turn ``budget`` seconds of commands together.

Ensures:
- A connection runs at least one command each time it is asked to (a light client, such as
  one ``peek`` per read, is never made to wait for a later turn).
- Past the turn's deadline, a connection stops after its current command, stops reading, and
  joins the back of a queue (``defer``); each later turn first runs the queue, in order, until
  that turn's deadline: so a busy connection gets at most about ``budget`` of a turn before the
  others, and every queued one is served in turn (round robin, none starved).
- A queued connection that is asked to run by anything else (its reads, replies it may now
  send) runs nothing until the queue reaches it: the budget cannot be dodged.
- At most ``starts`` costly starts (``start``: a TLS handshake, whose first step is a few
  hundred microseconds of public-key crypto the loop cannot break up) run in one turn; the
  rest wait, in order, for the next turns (5,000 client hellos otherwise meet in a few turns).
- A turn opens at the first ``deadline`` (or ``start``) call after the previous one closed; it
  closes at the start of the next loop turn (the callback ``soon`` schedules runs there).
- With ``yield_reads``: after a turn that read a small request (``read``: under
  ``YIELD_READ_BYTES``) from a connection other than the last one that made it so, the next
  loop turn first yields the CPU (``yield_cpu``, ``sched_yield``) once, before the loop looks
  for more input and sleeps if there is none. Why: many clients at one request each, on a few
  busy cores, otherwise make the server sleep and wake for nearly every request: a client
  readies its next request just after the loop went to sleep. Yielding lets a client that
  shares the core send it first, so the next turn reads several connections at once. A lone
  client (the same connection each time) and pipelined reads do not yield: nobody else's
  request comes. It pays where a turn's replies share a fixed cost, an fsync or a standby's
  acknowledgement (more requests per batch, fewer batches); where they do not (in memory,
  ``never``), the yield only delays the next turn, and the server turns it off there
  (``node.serve.turn_yields``; bench/server_bench.py's 16-client depth-1 cells measure both).

What a connection does with it (``Connection.process``): after at least one command, with
input still buffered, it reads ``clock`` and stops once past ``deadline()``. It asks for the
deadline only then, so a client sending one command per read costs the turns nothing.

Example:
    >>> now = [0.0]; later = []
    >>> t = Turns(later.append, budget=0.005, clock=lambda: now[0])
    >>> t.deadline()
    0.005
    >>> class C:
    ...     def run_deferred(s): print("ran")
    >>> t.defer(C()); len(t)
    1
    >>> now[0] = 1.0; [f() for f in later] and None  # the next loop turn
    ran
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Turns", "TURN_BUDGET", "STARTS_PER_TURN", "YIELD_READ_BYTES", "Deferred"]

TURN_BUDGET = 0.005
"""Seconds of commands one loop turn gives the connections together: a tenth of the 50 ms a
client may wait (the rest is the turn's own I/O and a loaded machine's scheduling)."""

STARTS_PER_TURN = 8
"""TLS handshakes started per loop turn: their crypto (a key share and a signature, about
0.3 ms each on a loaded P-256 server) then takes a few ms of a turn, as commands do."""


YIELD_READ_BYTES = 512
"""A read smaller than this (a request or two at depth 1) may make the next turn yield the CPU
first (``Turns.read``); a pipelined read is larger, and its connection has work for the turn."""


# YIELD_READ_BYTES as a C constant: compared per read with a C int
_YIELD_READ_BYTES = cython.declare(cython.Py_ssize_t, YIELD_READ_BYTES)


def _no_yield() -> None:
    pass


# (POSIX: the os module has it wherever stalkd serves; a no-op elsewhere)
SCHED_YIELD: Callable[[], object] = getattr(os, "sched_yield", _no_yield)


class Deferred(Protocol):
    """A connection that stopped for the turn's deadline (``connection.Connection``)."""

    def run_deferred(self) -> None: ...


@cython.cclass
class Turns:
    """The deadline of the current loop turn and the queue of connections past it."""

    # C fields when compiled (turns.pxd): a connection tells ``read`` of each read it served
    budget: float
    starts: int
    clock: Callable[[], float]
    yield_cpu: Callable[[], object]
    yield_reads: bool
    yields: int
    _soon: Callable[[Callable[[], None]], object]
    _deadline: float
    _open: bool
    _queue: deque[Deferred]
    _started: int
    _waiting: deque[Callable[[], None]]
    _yield_due: bool
    _last_reader: int

    def __init__(self, soon: Callable[[Callable[[], None]], object], *, budget: float = TURN_BUDGET,
                 starts: int = STARTS_PER_TURN, clock: Callable[[], float] = time.perf_counter,
                 yield_cpu: Callable[[], object] = SCHED_YIELD, yield_reads: bool = True) -> None:
        """``soon(f)`` runs ``f`` at the start of the next loop turn (``loop.call_soon``);
        ``yield_cpu()`` gives the CPU to another runnable process, if any (``read``), which
        small reads ask for only with ``yield_reads``."""
        self.budget = budget
        self.starts = starts
        self.clock = clock  # read by the connections too, between their commands
        self.yield_cpu = yield_cpu
        self.yield_reads = yield_reads
        self.yields = 0  # the yields so far (stats for the bench and tests)
        self._yield_due = False
        self._last_reader = 0  # id() of the connection whose read last made a turn yield
        self._soon = soon
        self._deadline = 0.0
        self._open = False
        self._queue = deque()
        self._started = 0  # costly starts run this turn
        self._waiting = deque()  # starts left for later turns

    def __len__(self) -> int:
        return len(self._queue)

    def deadline(self) -> float:
        """When this turn's commands should stop (``clock`` time); opens the turn if needed."""
        if not self._open:
            self._open = True
            self._deadline = self.clock() + self.budget
            self._soon(self._next_turn)
        return self._deadline

    def over(self) -> bool:
        """Whether this turn's budget is spent."""
        deadline = self.deadline()
        return self.clock() > deadline

    def defer(self, c: Deferred) -> None:
        """``c`` stopped for the deadline: it runs again when the queue reaches it."""
        self._queue.append(c)
        if not self._open:
            self.deadline()  # the turn that runs the queue is scheduled

    def start(self, f: Callable[[], None]) -> None:
        """Run ``f``, the start of costly work (a TLS handshake), in this turn if fewer than
        ``starts`` ran in it and none waits, otherwise in a later turn, in order."""
        self.deadline()  # the turn is open: its end counts the starts again
        if self._started < self.starts and not self._waiting:
            self._started += 1
            f()
        else:
            self._waiting.append(f)

    def read(self, who: object, size: int) -> None:
        """``who`` (a connection) was served a read of ``size`` bytes in this loop turn: with
        ``yield_reads``, the next turn yields the CPU first if the read was small and not the
        same connection's as the last time (see the module's docstring)."""
        if not self.yield_reads or self._yield_due or size >= _YIELD_READ_BYTES:
            return
        key = id(who)
        if key == self._last_reader:
            return  # a lone client: its next request comes only after this reply
        self._last_reader = key
        self._yield_due = True
        self._soon(self._yield)

    def _yield(self) -> None:
        self._yield_due = False
        self.yields += 1
        self.yield_cpu()

    def waiting(self) -> int:
        """Starts left for later turns."""
        return len(self._waiting)

    def _next_turn(self) -> None:
        self._open = False
        self._started = 0
        waiting = self._waiting
        while waiting and self._started < self.starts:
            self._started += 1
            waiting.popleft()()
        queue = self._queue
        # Those queued now, once at most: a connection deferred again goes to the back and
        # waits for the next turn, after the others.
        for _ in range(len(queue)):
            if not queue or self.over():
                break
            queue.popleft().run_deferred()
        if queue or waiting or self._started:
            self.deadline()  # the next turn runs the rest, and counts the starts again
