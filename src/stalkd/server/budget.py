"""One memory budget for every connection of a server (``--max-memory``): a pure core.

What a connection holds is its unparsed input (a body in flight included), its replies held
for a barrier and the replies its transport has not sent yet. Each connection reports that
figure when it has changed by at least ``GRAIN`` since its last report (at the end of a
flush, where reads and replies land: ``Connection.flush``), so a connection holding less than
``GRAIN`` is never tracked, and the per-read cost is a comparison. The budget keeps the sum.

Ensures:
- Past ``limit``, every tracked connection stops reading (``hold_reading(True)``) except one,
  the *runner*: the one with the most input in flight, whose body completing frees the most.
  So legitimate large puts are received one at a time instead of all stalling half-read, and
  connections holding less than ``GRAIN`` (the innocent, typically) keep being served. Only
  ``GRAIN`` or more of input makes a runner: a few commands left to run free nothing when they
  run, they add replies (let run one after another, 200 clients each leaving their
  ``list-tubes`` unread would take the sum to 200 times their share).
- Reading resumes for all once the sum is back under three quarters of ``limit``.
- While the sum stays past ``limit`` for ``grace`` seconds (replies nobody reads, a body that
  stopped arriving), the largest holder is closed (``shed``) with its figure in the reason, one
  at each ``tick`` until the sum is under ``limit``; nobody smaller is closed while it is open.
- ``tick`` (called by the server about every ``TICK`` seconds while anything is tracked)
  measures every tracked connection again: replies a client read since its last report are
  seen there, the only change no flush reports.

Example:
    >>> class C:
    ...     def __init__(s, i): s.id, s.peer, s.charged, s.held, s.closed = i, "p", 0, False, None
    ...     def measure_memory(s): pass
    ...     def hold_reading(s, on): s.held = on
    ...     def shed(s, why): s.closed = why
    >>> b = MemoryBudget(1000, grain=10, clock=lambda: 0.0)
    >>> a, z = C(1), C(2)
    >>> b.charge(a, 600, 0); b.charge(z, 0, 500); b.used, a.held, z.held
    (1100, False, True)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["MemoryBudget", "Holder", "GRAIN", "TICK", "default_limit"]

log = logging.getLogger("stalkd.server")

GRAIN = 32 * 1024
"""Changes smaller than this are not reported: a connection holding less is not tracked."""

TICK = 0.1
"""Seconds between two measurements of the tracked connections (``MemoryBudget.tick``)."""

DEFAULT_FRACTION = 8  # of the machine's memory
DEFAULT_CAP = 512 * 2**20
DEFAULT_FLOOR = 32 * 2**20


def default_limit(max_job_size: int = 0) -> int:
    """The budget when ``--max-memory`` is not given: an eighth of the machine's memory, at
    most 512 MiB, at least 32 MiB, and room for two of the largest jobs."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - every POSIX system has both
        ram = 8 * 2**30
    return max(DEFAULT_FLOOR, min(ram // DEFAULT_FRACTION, DEFAULT_CAP), 2 * max_job_size + 2**20)


class Holder(Protocol):
    """A connection as the budget sees it (``stalkd.server.connection.Connection``)."""

    id: int
    peer: str
    charged: int  # what the budget counts for it now (the budget writes it)

    def measure_memory(self) -> None: ...  # report again, through ``charge``
    def hold_reading(self, on: bool) -> None: ...
    def shed(self, why: str) -> None: ...


class MemoryBudget:
    """The sum of what the tracked connections hold, against ``limit`` bytes."""

    def __init__(self, limit: int, *, grain: int = GRAIN, grace: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.grain = grain
        self.grace = grace
        self.clock = clock
        self.used = 0
        self.peak = 0  # the largest ``used`` since the last ``take_peak``
        self.tracked: dict[int, Holder] = {}
        self._input: dict[int, int] = {}  # the input part of each tracked figure
        self.held: dict[int, Holder] = {}  # stopped reading by the budget
        self.runner: Holder | None = None
        self.over_since: float | None = None  # when the sum last went past the limit
        self.closed = 0  # connections closed for memory (a metric)
        self.squeezes = 0  # times the sum went past the limit (a metric)

    # --- what connections report ------------------------------------------------------------

    def charge(self, c: Holder, inp: int, out: int) -> None:
        """``c`` holds ``inp`` bytes of input and ``out`` of replies now."""
        use = inp + out
        if use < self.grain:
            use = inp = 0
        before = c.charged
        if use == before and (use == 0 or self._input.get(c.id) == inp):
            return
        self.used += use - before
        c.charged = use
        if use:
            self.tracked[c.id] = c
            self._input[c.id] = inp
        else:
            self.tracked.pop(c.id, None)
            self._input.pop(c.id, None)
        if self.used > self.peak:
            self.peak = self.used
        if self.over_since is None:
            if self.used > self.limit:
                self._squeeze()
        elif self.used <= self.limit * 3 // 4:
            self._release()
        elif self.runner is c and inp < self.grain:
            # Its body is in: the next one. Holding more still, it waits as the others do.
            self.runner = None
            if use:
                self._hold(c)
            self._next_runner()
        elif use and c is not self.runner and c.id not in self.held:
            self._hold(c)  # newly large while we are over: it waits too
            if self.runner is None and inp >= self.grain:
                self._next_runner()  # no body was being received: this one may be

    def forget(self, c: Holder) -> None:
        """``c`` is gone: nothing of it is counted any more."""
        self.held.pop(c.id, None)
        if c.charged:
            self.used -= c.charged
            c.charged = 0
            self.tracked.pop(c.id, None)
            self._input.pop(c.id, None)
        if self.runner is c:
            self.runner = None
            if self.over_since is not None:
                self._next_runner()
        if self.over_since is not None and self.used <= self.limit * 3 // 4:
            self._release()

    # --- the server's timer ----------------------------------------------------------------

    def tick(self) -> None:
        """Measure every tracked connection again, then close the largest holder if the sum
        has been past the limit for ``grace``."""
        for c in list(self.tracked.values()):
            c.measure_memory()
        if self.over_since is None or self.used <= self.limit:
            return
        if self.clock() - self.over_since < self.grace or not self.tracked:
            return
        worst = max(self.tracked.values(), key=lambda h: h.charged)
        self.closed += 1
        why = (f"it holds {_mib(worst.charged)} of unread replies and unparsed input, the most of "
               f"any connection, and the server's connections have held more than --max-memory "
               f"{_mib(self.limit)} ({_mib(self.used)}) for {self.grace:g} s")
        log.warning("conn %d from %s closed: %s", worst.id, worst.peer, why)
        self.forget(worst)
        worst.shed(why)

    def active(self) -> bool:
        """Whether the server's timer should keep calling ``tick``."""
        return bool(self.tracked) or bool(self.held)

    def take_peak(self) -> int:
        """The largest sum since the last call (the memory the allocator may now give back)."""
        peak, self.peak = self.peak, self.used
        return peak

    # --- policy ----------------------------------------------------------------------------

    def _squeeze(self) -> None:
        self.over_since = self.clock()
        self.squeezes += 1
        log.warning("connections hold %s, past --max-memory %s: the %d largest stop reading "
                    "until it falls under %s", _mib(self.used), _mib(self.limit),
                    len(self.tracked), _mib(self.limit * 3 // 4))
        self.runner = None
        self._next_runner()
        for c in list(self.tracked.values()):
            if c is not self.runner:
                self._hold(c)

    def _next_runner(self) -> None:
        """Let the tracked connection with the most input in flight, at least ``grain``, read
        on (held ones too)."""
        best, most = None, self.grain - 1
        for cid, n in self._input.items():
            if n > most:
                best, most = self.tracked[cid], n
        self.runner = best
        if best is not None and self.held.pop(best.id, None) is not None:
            best.hold_reading(False)

    def _hold(self, c: Holder) -> None:
        self.held[c.id] = c
        c.hold_reading(True)

    def _release(self) -> None:
        self.over_since = None
        self.runner = None
        held, self.held = self.held, {}
        for c in held.values():
            c.hold_reading(False)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
