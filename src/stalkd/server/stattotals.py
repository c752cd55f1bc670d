"""The job totals of ``stats`` counted a slice of the tubes per loop turn: a pure core.

Past ``TOTALS_AT_ONCE`` tubes the engine's ``stats`` leaves its five job totals out
(engine/stats.py): one pass over 100k tubes held the loop 25-55 ms of CPU. The server asks
``StatsTotals`` for them and keeps the connection waiting (as a blocked reserve: its next
commands run after the reply); each loop turn sums ``SLICE`` tubes with the engine's
``totals``.

Ensures:
- A count starts after every ``ask`` it answers: the asker's own earlier commands are counted
  (a client that put a job sees it in ``stats``). An ``ask`` made while a count runs waits for
  the next count, which starts as soon as that one ends.
- One count at a time, whoever asks and however many ask: a loop turn sums at most ``SLICE``
  tubes, and every asker of one count gets the same figures.
- Each tube's five figures are read at one instant. Commands other clients run between two
  slices may be counted or not, as if they had run after or before the ``stats``; a job the
  admin API moves from a tube not yet read to one already read meanwhile is counted in
  neither. A tube made during the count is not counted (it had no job when the count started).

Example:
    >>> from stalkd.engine.objects import Tube
    >>> tubes = [Tube(str(i), i) for i in range(5)]
    >>> later = []
    >>> st = StatsTotals(lambda: tubes, later.append, step=2)
    >>> st.ask(print)
    >>> while later: later.pop(0)()
    {'current-jobs-urgent': 0, 'current-jobs-ready': 0, 'current-jobs-reserved': 0, 'current-jobs-delayed': 0, 'current-jobs-buried': 0}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stalkd.engine.objects import Tube
from stalkd.engine.stats import TOTALS, totals

__all__ = ["StatsTotals", "SLICE"]

SLICE = 10_000
"""Tubes summed per loop turn: 2.5-5.5 ms of CPU."""


class StatsTotals:
    """Counts ``TOTALS`` over ``tubes()`` a slice per ``soon`` call, for those who ask."""

    __slots__ = ("_tubes_of", "_soon", "step", "_asked", "_answer", "_tubes", "_read", "_sums")

    def __init__(self, tubes: Callable[[], Sequence[Tube]],
                 soon: Callable[[Callable[[], None]], object], *, step: int = SLICE) -> None:
        """``tubes()``: the engine's tubes now; ``soon(f)`` runs ``f`` at the next loop turn
        (``loop.call_soon``)."""
        self._tubes_of = tubes
        self._soon = soon
        self.step = max(1, step)
        self._asked: list[Callable[[dict[str, int]], None]] = []  # for the next count
        self._answer: list[Callable[[dict[str, int]], None]] = []  # for the count running
        self._tubes: list[Tube] = []
        self._read = 0
        self._sums = [0] * len(TOTALS)

    def ask(self, done: Callable[[dict[str, int]], None]) -> None:
        """Count the totals from now on; ``done(totals)`` once counted."""
        self._asked.append(done)
        if not self._answer:
            self._start()

    def counting(self) -> bool:
        """Whether a count runs."""
        return bool(self._answer)

    def _start(self) -> None:
        self._answer, self._asked = self._asked, []
        self._tubes = list(self._tubes_of())  # one C copy: the engine's list changes meanwhile
        self._read = 0
        self._sums = [0] * len(TOTALS)
        self._soon(self._slice)

    def _slice(self) -> None:
        start = self._read
        part = self._tubes[start:start + self.step]
        self._read = start + len(part)
        self._sums = [a + b for a, b in zip(self._sums, totals(part), strict=True)]
        if self._read < len(self._tubes):
            self._soon(self._slice)
            return
        figures = dict(zip(TOTALS, self._sums, strict=True))
        answer, self._answer, self._tubes = self._answer, [], []
        if self._asked:
            self._start()
        for done in answer:
            done(figures)
