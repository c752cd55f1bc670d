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
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["steady_wall_clock"]


def steady_wall_clock(wall: Callable[[], float] = time.time,
                      monotonic: Callable[[], float] = time.monotonic) -> Callable[[], float]:
    """A clock reading ``wall()`` now and advancing with ``monotonic()`` from then on.

    >>> ticks = iter([100.0, 101.5])
    >>> clock = steady_wall_clock(wall=lambda: 5000.0, monotonic=lambda: next(ticks))
    >>> clock()
    5001.5
    """
    base = wall() - monotonic()
    return lambda: base + monotonic()
