"""Retry delays: jittered exponential backoff as a pure function.

Ensures: the delay for attempt ``n`` lies in ``[0, min(max_delay, base * factor**(n-1))]`` (full
jitter) or exactly that cap (``jitter=0``); it is a whole number of seconds, since beanstalkd
delays are whole seconds; and it never reads a clock or a global random state (``rand`` is an
argument), so schedules are reproducible in tests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Backoff", "compute_backoff"]


def compute_backoff(
    attempt: int,
    *,
    base: float = 1.0,
    factor: float = 2.0,
    max_delay: float = 3600.0,
    jitter: float = 1.0,
    rand: float | None = None,
) -> int:
    """Seconds to wait before retrying after failed attempt number ``attempt`` (1-based).

    The cap grows as ``base * factor**(attempt-1)`` up to ``max_delay``; ``jitter`` in [0, 1] is
    the fraction of the cap that is randomised ("full jitter" at 1.0, as in AWS's analysis: it
    spreads a thundering herd of retries evenly). ``rand`` in [0, 1) replaces ``random.random()``.

    >>> [compute_backoff(n, jitter=0) for n in (1, 2, 3, 4)]
    [1, 2, 4, 8]
    >>> compute_backoff(3, jitter=1.0, rand=0.5)
    2
    >>> compute_backoff(30, max_delay=60, jitter=0)
    60
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be in [0, 1], got {jitter}")
    if base < 0 or factor < 1 or max_delay < 0:
        raise ValueError(f"need base >= 0, factor >= 1, max_delay >= 0 (got {base}, {factor}, {max_delay})")
    try:
        cap = min(max_delay, base * factor ** (attempt - 1))
    except OverflowError:  # attempt in the thousands: the cap has long been reached
        cap = max_delay
    r = random.random() if rand is None else rand
    if not 0.0 <= r < 1.0:
        raise ValueError(f"rand must be in [0, 1), got {r}")
    delay = cap * (1.0 - jitter) + cap * jitter * r
    # Round to nearest whole second: beanstalkd's delay is an integer number of seconds.
    return int(delay + 0.5)


@dataclass(frozen=True)
class Backoff:
    """A backoff policy as a value, for ``@app.task(backoff=Backoff(base=2, max_delay=600))``.

    >>> Backoff(base=5, jitter=0).delay(2)
    10
    """

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 1.0

    def delay(self, attempt: int, rand: float | None = None) -> int:
        return compute_backoff(attempt, base=self.base, factor=self.factor,
                               max_delay=self.max_delay, jitter=self.jitter, rand=rand)
