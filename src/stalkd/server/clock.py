"""The server's clock: wall-clock seconds that never jump.

Ensures: between two readings, the clock advances by exactly the monotonic time that passed,
whatever the machine's wall clock did meanwhile (an operator's ``date -s``, a bad NTP step).

Job deadlines (delays, TTRs) are absolute times, written to the log in wall-clock seconds so
they mean something after a restart. Read straight from ``time.time``, a wall clock stepped an
hour forward made every delayed job ready and every reservation expire at once (the fault
campaign's clock-jump nemesis found it: delayed jobs delivered before their delay); stepped
back, it held them an hour longer. Anchored to the wall clock once, at start, and advanced by
the monotonic clock, a running server measures every delay and TTR in real elapsed time; a
step only counts from the next start.

Compiled, ``SteadyClock`` is an extension type (clock.pxd) and the server reads it per command
with a C call (``now``) that reads ``CLOCK_MONOTONIC`` itself, which is what ``time.monotonic``
reads on Linux: no Python call and no float object (a lambda around ``time.monotonic`` cost
~300 instructions a command).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["SteadyClock", "steady_wall_clock"]


@cython.cclass
class SteadyClock:
    """A clock reading ``wall()`` once, at start, and advancing with ``monotonic()`` from then on.
    Called, it gives the time; ``now`` is the same reading (a C call when compiled).

    >>> ticks = iter([100.0, 101.5])
    >>> clock = SteadyClock(wall=lambda: 5000.0, monotonic=lambda: next(ticks))
    >>> clock()
    5001.5
    """

    base: float
    _monotonic: Callable[[], float] | None  # None: the C clock (compiled), time.monotonic's

    def __init__(self, wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = None if monotonic is time.monotonic and cython.compiled else monotonic
        self.base = wall() - monotonic()

    def __call__(self) -> float:
        return self.now()

    def now(self) -> float:
        mono = self._monotonic
        if mono is None:
            return self.base + _monotonic_c()
        return self.base + mono()


@cython.locals(secs=cython.double)
def _monotonic_c() -> float:
    if cython.compiled:
        ts = cython.declare(timespec)
        clock_gettime(CLOCK_MONOTONIC, cython.address(ts))
        secs: float = ts.tv_sec + ts.tv_nsec * 1e-9
        return secs
    return time.monotonic()  # never reached: uncompiled, _monotonic is set


if not cython.compiled:  # compiled, clock.pxd takes these from C
    CLOCK_MONOTONIC = time.CLOCK_MONOTONIC
    timespec: Any = object

    def clock_gettime(clk: int, ts: object) -> int:
        raise NotImplementedError("compiled only")


def steady_wall_clock(wall: Callable[[], float] = time.time,
                      monotonic: Callable[[], float] = time.monotonic) -> SteadyClock:
    """A clock reading ``wall()`` now and advancing with ``monotonic()`` from then on.

    >>> ticks = iter([100.0, 101.5])
    >>> clock = steady_wall_clock(wall=lambda: 5000.0, monotonic=lambda: next(ticks))
    >>> clock()
    5001.5
    """
    return SteadyClock(wall, monotonic)
