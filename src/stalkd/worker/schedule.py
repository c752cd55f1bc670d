"""Periodic schedules: what a cron line means, and which of its slots are due (no I/O).

A schedule names a task, a cron line (five fields, or six with seconds last, as croniter reads
them) and a time zone. Its *slots* are the instants the cron line matches, in whole epoch
seconds. :func:`decide` is the whole scheduling decision, a pure function of the schedule, the
newest slot already handled and the time now:

* slots in ``(last, now]`` no older than ``grace`` seconds are *on time*: each fires once;
* older ones were *missed* (every scheduler was down, or far behind): with ``missed="skip"``
  they are recorded as handled without running; with ``missed="once"`` the newest of them
  fires, once for all of them.

>>> s = Schedule("tick", "* * * * * */10", task="t", grace=30)   # every 10 seconds
>>> decide(s, last=100, now=125.5)
Decision(fire=(110, 120), skip=None, wake_at=130.0)
>>> decide(s, last=0, now=125.5)           # 10..90 missed: skipped, 100..120 on time
Decision(fire=(100, 110, 120), skip=None, wake_at=130.0)
>>> decide(Schedule("tick", "* * * * * */10", task="t", grace=5), last=0, now=125.5)
Decision(fire=(), skip=120, wake_at=130.0)
>>> decide(Schedule("tick", "* * * * * */10", task="t", grace=5, missed="once"), last=0, now=125.5)
Decision(fire=(120,), skip=None, wake_at=130.0)

Who fires a slot, exactly once among several schedulers, and where the newest handled slot is
kept so that it survives restarts, is ``scheduler``'s part.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple
from zoneinfo import ZoneInfo

__all__ = ["Schedule", "Decision", "decide", "slots_between", "MISSED_POLICIES"]

MISSED_POLICIES = ("skip", "once")
# beanstalkd's tube-name characters: the schedule's name becomes part of a tube name
_NAME = re.compile(r"[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{0,150}")


def _croniter() -> Any:
    try:
        from croniter import croniter
    except ImportError:
        raise ImportError("periodic schedules need croniter: pip install 'stalkd[schedule]'") \
            from None
    return croniter


@dataclass(frozen=True)
class Schedule:
    """Run ``task`` (a Task, or its name) at each slot of ``cron``.

    ``payload``: the job's payload, or a function of the slot (an aware ``datetime``) that
    returns it. ``grace``: seconds after its slot during which a slot still fires on time.
    """

    name: str
    cron: str
    task: Any
    payload: Any = None
    missed: Literal["skip", "once"] = "skip"
    grace: float = 60.0
    tz: str = "UTC"

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"schedule name {self.name!r}: use letters, digits and +/;.$_()- "
                             "(at most 151 characters, not starting with '-')")
        if self.missed not in MISSED_POLICIES:
            raise ValueError(f"schedule {self.name}: missed must be one of "
                             f"{', '.join(MISSED_POLICIES)}, got {self.missed!r}")
        if not self.grace >= 0:
            raise ValueError(f"schedule {self.name}: grace must be >= 0, got {self.grace!r}")
        if not _croniter().is_valid(self.cron):
            raise ValueError(f"schedule {self.name}: {self.cron!r} is not a cron line (five "
                             "fields, or six with seconds last)")
        ZoneInfo(self.tz)  # raises for an unknown zone

    def payload_for(self, slot: int) -> Any:
        """The payload of the job for ``slot``."""
        if callable(self.payload):
            fn: Callable[[dt.datetime], Any] = self.payload
            return fn(dt.datetime.fromtimestamp(slot, ZoneInfo(self.tz)))
        return self.payload

    def _iter(self, start: float) -> Any:
        return _croniter()(self.cron, dt.datetime.fromtimestamp(start, ZoneInfo(self.tz)))

    def next_after(self, t: float) -> int:
        """The first slot strictly after ``t``."""
        return int(self._iter(t).get_next(float))

    def newest_at_or_before(self, t: int) -> int:
        """The newest slot at or before the whole second ``t``."""
        return int(self._iter(t + 1).get_prev(float))


class Decision(NamedTuple):
    """What a scheduler does now: put a job for each slot of ``fire`` (oldest first); record
    ``skip`` as handled without a job (missed slots, ``missed="skip"``); look again at
    ``wake_at`` (the next slot)."""

    fire: tuple[int, ...]
    skip: int | None
    wake_at: float


def slots_between(schedule: Schedule, after: int, until: int) -> list[int]:
    """The slots in ``(after, until]``, oldest first.

    >>> slots_between(Schedule("m", "*/15 * * * *", task="t"), 0, 3600)
    [900, 1800, 2700, 3600]
    """
    out: list[int] = []
    it = schedule._iter(after)
    while (slot := int(it.get_next(float))) <= until:
        out.append(slot)
    return out


def decide(schedule: Schedule, last: int, now: float) -> Decision:
    """The scheduling decision (see the module docstring); ``last`` is the newest slot already
    handled, or, for a schedule that never fired, when the scheduler started."""
    now_s = math.floor(now)
    on_time_from = max(last, math.floor(now - schedule.grace))
    fire = slots_between(schedule, on_time_from, now_s)
    skip = None
    if on_time_from > last:
        late = schedule.newest_at_or_before(on_time_from)
        if late > last:
            if schedule.missed == "once":
                fire.insert(0, late)
            elif not fire:  # else recording the newest on-time slot covers it
                skip = late
    return Decision(tuple(fire), skip, float(schedule.next_after(now_s)))
