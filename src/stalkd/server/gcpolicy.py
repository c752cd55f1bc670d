"""When the cyclic garbage collector may stop the loop: on a timer, not per 25 % heap growth.

CPython runs a full collection whenever the objects promoted to its oldest generation since the
last one reach a quarter of that generation, and a full collection walks every tracked object.
A server holding many queued jobs pays for that with loop stalls that grow with the queue
(beanstalkd, in C, has no such pause), recurring at each 25 % growth and, under churn, every
few seconds; ``bench/stall_bench.py`` measures the longest wait a client sees.

Jobs, tubes and replies die by reference counting; the collector is only needed for reference
cycles, which the server makes rarely (an exception and its traceback, asyncio internals). So
this policy keeps the young collections (cheap, they catch most fresh cycles) and turns the
automatic full collection off; the server runs one every ``full_every`` seconds instead.
Compiled, jobs and the protocol's commands and replies are not tracked at all (``no_gc``:
objects.Job, protocol/commands.py), so no collection walks a job's fields: the full one only
passes over each job as an entry of its table's dicts.

A standby (``young_only``, asked at ``start`` and at every ``tick``) keeps only the youngest
generation's collections: each job its primary sends lives until deleted, and a middle
collection walked every one again right after the young one had (callgrind, a standby applying
pipelined puts: about 500 of its instructions per job). Its objects that survive a young
collection wait for the full one; once promoted, the next tick brings the middle collections
back.

Ensures:
- Cyclic garbage is freed at most ``full_every`` seconds after it became garbage (young cycles
  much sooner, by the young collections).
- The only loop stall that grows with the number of queued jobs is that one full collection
  per ``full_every`` seconds.

Example:
    >>> p = GcPolicy(full_every=600.0, now=0.0)
    >>> p.tick(1.0)        # nothing due yet: returns when to call again
    600.0
"""

from __future__ import annotations

import gc
from collections.abc import Callable

__all__ = ["GcPolicy"]

_NEVER = 2**31 - 1  # a gen2 threshold no count reaches: no automatic full collection


class GcPolicy:
    """Young collections as usual, a full one every ``full_every`` seconds (call ``tick``)."""

    def __init__(self, full_every: float = 600.0, *, now: float, young_only: Callable[[], bool] | None = None) -> None:
        if not full_every > 0:
            raise ValueError(f"full_every must be > 0, got {full_every}")
        self.full_every = full_every
        self._next_full = now + full_every
        self._saved: tuple[int, int, int] | None = None
        self._young_only = young_only  # whether this server is a standby now (see the module)
        self.full_collections = 0

    def start(self) -> None:
        """Turn the automatic full collection off (``stop`` restores the thresholds)."""
        if self._saved is None:
            self._saved = gc.get_threshold()
            self._set()

    def _set(self) -> None:
        assert self._saved is not None
        young, middle, _ = self._saved
        if self._young_only is not None and self._young_only():
            middle = _NEVER
        gc.set_threshold(young, middle, _NEVER)

    def tick(self, now: float) -> float:
        """Collect fully if due at ``now``; returns the time of the next call."""
        if now >= self._next_full:
            gc.collect()
            self.full_collections += 1
            self._next_full = now + self.full_every
            if self._saved is not None:
                self._set()  # (a standby promoted since: the middle collections again)
        return self._next_full

    def stop(self) -> None:
        """Restore the thresholds ``start`` found."""
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
