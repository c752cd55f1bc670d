"""A histogram cheap enough for the job path: one bisect and two additions per observation.

prometheus-client's ``Histogram.observe`` takes a lock and walks its buckets; for a value seen
once per reserved job that is most of the cost of watching. ``Buckets`` keeps plain counts and
is turned into a Prometheus histogram only when /metrics is scraped.

Ensures: counts are cumulative only when exported (``cumulative``); observations are never
lost on the thread that makes them (one writer per ``Buckets``: the loop thread, or the sync
thread for fsync timings); a scrape may see a count without its sum, never a torn list.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["Buckets", "LATENCY", "JOB_SECONDS", "COUNTS"]

# Upper bounds (le) of the buckets, seconds: fsync, snapshot steps.
LATENCY = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
           2.5, 5.0, 10.0)  # fmt: skip
# Seconds a job waits or runs: from a millisecond to a day.
JOB_SECONDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
               3600.0, 21600.0, 86400.0)  # fmt: skip
# Records per fsync.
COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class Buckets:
    """Counts per bucket plus a sum.

    >>> b = Buckets((1.0, 2.0)); b.observe(0.5); b.observe(1.5); b.observe(9.0)
    >>> b.cumulative(), b.sum
    ([('1.0', 1), ('2.0', 2), ('+Inf', 3)], 11.0)
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count of observations <= le) pairs, as the Prometheus exposition wants them."""
        out = []
        total = 0
        counts = list(self.counts)  # one copy: the writer may add meanwhile
        for bound, n in zip((*map(str, map(float, self.bounds)), "+Inf"), counts, strict=True):
            total += n
            out.append((bound, total))
        return out
