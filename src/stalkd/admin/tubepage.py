"""One page of the tubes, sorted and searched, chosen a slice at a time (the overview's core).

With 100k tubes a person needs to find one tube (a search by name) and the busy ones (a sort
by jobs), and neither may hold the event loop: a sort of 100k keys in one go is ~30 ms of CPU
before anything else runs. ``TubePage`` reads a copy of the tube list ``SLICE`` tubes per
``step``: each step filters its slice by the search text, sums the figures of every tube
(``totals``, what the dashboard's cards show) and sorts its slice's keys into a run; once
every slice is read, further steps merge the runs up to the page, ``SLICE`` keys a step. The
caller serves its loop between steps (``AdminOps.overview``). No clock, no socket.

Orders: ``created`` (the order of list-tubes), ``name``, and the figures busiest first
(``jobs`` = ready + reserved + delayed + buried, each state, ``waiting``, ``puts`` = jobs ever
put); ties in creation order.

Ensures: a page holds ``limit`` tubes from ``offset`` of the matching tubes in the order asked;
``matched`` counts the matching tubes; ``totals`` sums every tube (matching or not), stalkd's
own tubes apart. A tube dropped while the page is chosen may still be shown (with what it held
when read); one made meanwhile is not.

Example:
    >>> from stalkd.engine.objects import Tube
    >>> tubes = [Tube(n, i) for i, n in enumerate(["b", "a", "stalkd.failed", "ab"])]
    >>> p = TubePage(tubes, sort="name", q="a", internal=False, limit=2)
    >>> while not p.step(): pass
    >>> [t.name for t in p.page()], p.matched, p.totals["internal"]["tubes"]
    (['a', 'ab'], 2, 1)
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter, methodcaller
from typing import Any

from stalkd.engine.objects import Tube
from stalkd.tubes import INTERNAL_PREFIX

__all__ = ["SORTS", "SLICE", "TOTALS", "TubePage"]

SLICE = 5000  # tubes read (or keys skipped) per step: a few ms of CPU

_COUNTS: dict[str, Callable[[Tube], int]] = {
    "jobs": lambda t: len(t.ready) + t.reserved + len(t.delayed) + len(t.buried),
    "ready": lambda t: len(t.ready), "reserved": lambda t: t.reserved,
    "delayed": lambda t: len(t.delayed), "buried": lambda t: len(t.buried),
    "waiting": lambda t: len(t.waiting), "puts": lambda t: t.total_jobs,
}  # fmt: skip
SORTS = ("created", "name", *_COUNTS)
"""The orders a page may be asked in (``?sort=``)."""
TOTALS = ("tubes", "ready", "reserved", "delayed", "buried", "puts", "deletes")
"""The figures ``totals`` sums, for stalkd's own tubes and for the others."""


_NAME = attrgetter("name")
_OWN = methodcaller("startswith", INTERNAL_PREFIX)
_FIGURES = [attrgetter(a) for a in ("ready", "reserved", "delayed", "buried", "total_jobs", "cmd_delete")]


def _sums(tubes: Sequence[Tube]) -> list[int]:
    # each one C loop (map, attrgetter, len): no Python frame per tube
    ready, reserved, delayed, buried, puts, deletes = _FIGURES
    return [len(tubes), sum(map(len, map(ready, tubes))), sum(map(reserved, tubes)),
            sum(map(len, map(delayed, tubes))), sum(map(len, map(buried, tubes))),
            sum(map(puts, tubes)), sum(map(deletes, tubes))]


class TubePage:
    """Choose ``limit`` tubes from ``offset`` among ``tubes`` whose name contains ``q``
    (stalkd's own only when ``internal``), in the order ``sort``: call ``step`` until it
    returns True (each call reads or merges at most ``step`` tubes), then ``page``."""

    def __init__(self, tubes: Sequence[Tube], *, sort: str = "created", q: str = "",
                 internal: bool = True, offset: int = 0, limit: int = 500,
                 step: int = SLICE) -> None:
        if sort not in SORTS:
            raise ValueError(f"unknown sort {sort!r} ({', '.join(SORTS)})")
        self.sort = sort
        self.q = q
        self.internal = internal
        self.offset = max(0, offset)
        self.limit = max(1, limit)
        self.step_size = max(1, step)
        self.matched = 0
        self.totals: dict[str, dict[str, int]] = {
            "internal": dict.fromkeys(TOTALS, 0), "other": dict.fromkeys(TOTALS, 0)}
        self._tubes = list(tubes)  # one C copy; the engine's list may change between steps
        self._read = 0
        self._runs: list[Sequence[Any]] = []
        self._merged: Iterator[Any] | None = None
        self._skipped = 0
        self._page: list[Tube] = []
        self._done = False

    def step(self) -> bool:
        """Read the next slice of tubes, or skip the next slice of keys before the page;
        True once the page is chosen."""
        if self._done:
            return True
        if self._read < len(self._tubes):
            self._read_slice()
            return False
        if self._merged is None:
            runs = self._runs
            # created order: the runs follow one another; else merge the sorted runs
            self._merged = (itertools.chain.from_iterable(runs) if self.sort == "created"
                            else heapq.merge(*runs))
        if self._skipped < self.offset:
            n = min(self.step_size, self.offset - self._skipped)
            got = sum(1 for _ in itertools.islice(self._merged, n))
            self._skipped += n
            if got < n:
                self._done = True
            return self._done
        tubes, n = self._tubes, len(self._tubes)
        keys = list(itertools.islice(self._merged, self.limit))
        if self.sort == "name":
            self._page = [tubes[i] for _, i in keys]
        else:
            self._page = [tubes[k % n] for k in keys]  # k = -count * n + position
        self._done = True
        return True

    def page(self) -> list[Tube]:
        assert self._done, "step() until it returns True"
        return self._page

    def _read_slice(self) -> None:
        start = self._read
        part = self._tubes[start:start + self.step_size]
        self._read += len(part)
        names = list(map(_NAME, part))
        own: list[int] = []
        if any(map(_OWN, names)):  # stalkd's own tubes are few: a Python pass only then
            own = [i for i, name in enumerate(names) if name.startswith(INTERNAL_PREFIX)]
        sums = _sums(part)
        if own:
            mine = _sums([part[i] for i in own])
            sums = [a - b for a, b in zip(sums, mine, strict=True)]
            self._add("internal", mine)
        self._add("other", sums)
        q, sort = self.q, self.sort
        if not q and sort == "created":  # the dashboard's usual page: positions, no key
            if not own or self.internal:
                self.matched += len(part)
                self._runs.append(range(start, start + len(part)))
                return
            skip = set(own)
            chosen = [start + i for i in range(len(part)) if i not in skip]
            self.matched += len(chosen)
            self._runs.append(chosen)
            return
        hidden = set() if self.internal else set(own)
        picked = [(start + i, part[i]) for i, name in enumerate(names)
                  if (not q or q in name) and i not in hidden]
        self.matched += len(picked)
        run: list[Any]
        if sort == "created":
            run = [i for i, _ in picked]  # already in order
        elif sort == "name":
            run = sorted((t.name, i) for i, t in picked)  # names are unique: i never compared
        else:
            count, n = _COUNTS[sort], len(self._tubes)
            run = sorted(-count(t) * n + i for i, t in picked)
        if run:
            self._runs.append(run)

    def _add(self, group: str, sums: list[int]) -> None:
        total = self.totals[group]
        for k, v in zip(TOTALS, sums, strict=True):
            total[k] += v
