"""Running periodic schedules against a server: ``stalkd scheduler module:app``, or a thread of
``stalkd worker module:app --schedules``.

The ledger
----------
Each schedule keeps its history on the server, in the tube ``stalkd.schedule.<name>``, as
marker jobs nobody reserves: one per handled slot, with priority ``2**32 - 1 - slot``, so the
ready heap (ordered by priority, then id) shows the *newest* slot first, and among markers of
one slot the first one put. That makes the ledger two things at once:

* **where the schedule stands**: ``peek-ready`` of the tube is the newest handled slot. It is a
  job, durable in the server's WAL like any other, so a scheduler that restarts (or a new one)
  continues from there: nothing is kept in local files;
* **who fires a slot**: to handle slot S a scheduler puts its marker for S, then peeks. It
  handled S, and puts the task's job, only when the marker on top is its own; otherwise it
  deletes its marker (someone else was first, or already moved past S). Two schedulers cannot
  both see their own marker on top: the later-put one lies below the earlier one for as long as
  that one lives, and the only markers anyone else deletes are of slots older than the one on
  top. So each slot fires at most once however many schedulers run. The winner then deletes the
  previous slot's marker, so the tube holds one marker at rest.

Why not the unique keys (``unique``): a unique key is freed when its job completes, after which
a late scheduler could claim the same slot again; the ledger's marker outlives the job.

Known limits: a scheduler killed between winning a slot and putting its job loses that slot's
run (at most once in that window; put-then-claim would risk twice instead). One killed between
putting a losing marker and deleting it leaves that marker behind (harmless: it is below the
top). Slots are whole epoch seconds below 2**32 (until 2106).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from stalkd.worker.middleware.base import Middleware, RunningWorker
from stalkd.worker.schedule import Schedule, decide
from stalkd.worker.stopflag import StopFlag

log = logging.getLogger("stalkd.scheduler")

__all__ = ["Scheduler", "RunSchedules", "ledger_tube", "last_slot", "claim_slot"]

LEDGER_PREFIX = "stalkd.schedule."
_MAX_PRIORITY = 2**32 - 1


class _Ops(Protocol):
    def put(self, tube: str, body: bytes, priority: int, delay: int, ttr: int) -> int: ...
    def peek_ready(self, tube: str) -> tuple[int, bytes] | None: ...
    def delete(self, job_id: int) -> bool: ...


def ledger_tube(schedule: Schedule) -> str:
    return LEDGER_PREFIX + schedule.name


def _slot_of(body: bytes) -> int:
    return int(json.loads(body)["slot"])


def last_slot(conn: _Ops, schedule: Schedule) -> int | None:
    """The newest slot of ``schedule`` that some scheduler handled (None: never)."""
    top = conn.peek_ready(ledger_tube(schedule))
    return None if top is None else _slot_of(top[1])


def claim_slot(conn: _Ops, schedule: Schedule, slot: int, *, fired: bool, now: float) -> bool:
    """Try to be the one scheduler that handles ``slot`` (see the module docstring)."""
    if not 0 <= slot <= _MAX_PRIORITY:
        raise ValueError(f"schedule {schedule.name}: slot {slot} is outside 0..2**32-1")
    tube = ledger_tube(schedule)
    previous = conn.peek_ready(tube)
    body = json.dumps({"schedule": schedule.name, "slot": slot, "fired": fired,
                       "at": round(now, 3)}).encode()
    mine = conn.put(tube, body, _MAX_PRIORITY - slot, 0, 1)
    top = conn.peek_ready(tube)
    if top is None or top[0] != mine:
        conn.delete(mine)
        return False
    if previous is not None and _slot_of(previous[1]) < slot:
        conn.delete(previous[0])  # already gone when another scheduler got there first
    return True


class Scheduler:
    """Fires ``schedules`` (default: the app's) through ``app``'s server connection.

    ``tick()`` does one round and returns when to look again; ``run()`` loops until
    ``stop()``. ``clock`` is injectable for tests.
    """

    def __init__(self, app: Any, schedules: Sequence[Schedule] | None = None, *,
                 connect: Callable[[], Any] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self.schedules = list(app.schedules.values() if schedules is None else schedules)
        if not self.schedules:
            raise ValueError("the app has no schedules (app.schedule(...) adds one)")
        self.clock = clock
        self._connect = connect
        self._conn: Any = None
        self.started = int(clock())
        self.fired = 0
        self.stopping = StopFlag()  # set by the CLI's SIGTERM/SIGINT handlers

    def _ops(self) -> Any:
        if self._conn is None:
            if self._connect is not None:
                self._conn = self._connect()
            else:
                from stalkd.worker.ops import ServerOps

                self._conn = ServerOps(self.app.address, timeout=self.app.client_timeout)
        return self._conn

    def tick(self) -> float:
        """Handle every due slot of every schedule; returns the time of the next slot."""
        conn = self._ops()
        wake = float("inf")
        for s in self.schedules:
            last = last_slot(conn, s)
            d = decide(s, self.started if last is None else last, self.clock())
            for slot in d.fire:
                if claim_slot(conn, s, slot, fired=True, now=self.clock()):
                    self._put(s, slot)
            if d.skip is not None and claim_slot(conn, s, d.skip, fired=False, now=self.clock()):
                log.warning("schedule %s: missed slots up to %s skipped (missed='skip'; "
                            "missed='once' runs them once)", s.name, _iso(d.skip))
            wake = min(wake, d.wake_at)
        return wake

    def _put(self, s: Schedule, slot: int) -> None:
        task = self.app.tasks[s.task] if isinstance(s.task, str) else s.task
        try:
            job_id = task.put(s.payload_for(slot))
        except OSError:
            raise
        except Exception:
            # The user's payload function or validator: this slot is lost, the schedule not.
            log.exception("schedule %s: slot %s could not be put", s.name, _iso(slot))
            return
        self.fired += 1
        log.info("schedule %s: slot %s fired job %s", s.name, _iso(slot), job_id)

    def run(self) -> int:
        log.info("scheduler: %d schedule(s) on %s: %s", len(self.schedules), self.app.address,
                 ", ".join(f"{s.name} ({s.cron})" for s in self.schedules))
        while not self.stopping.is_set():
            try:
                wake = self.tick()
            except OSError as exc:
                log.warning("scheduler: connection to %s lost (%s); reconnecting",
                            self.app.address, exc)
                self._drop()
                self.stopping.wait(1.0)  # reconnect backoff, not synchronisation
                continue
            # a bounded wait, so a clock that jumps (suspend, NTP) is noticed within a second
            self.stopping.wait(min(1.0, max(0.0, wake - self.clock())))
        self._drop()
        log.info("scheduler stopped after firing %d job(s)", self.fired)
        return 0

    def stop(self, now: bool = False) -> None:
        self.stopping.set()

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None


def _iso(slot: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(slot))


class RunSchedules(Middleware):
    """Runs the app's schedules on a thread of the worker (``stalkd worker --schedules``):
    started with the worker and stopped with it; in ``--mode processes`` in the parent only,
    after its first children are forked."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.scheduler: Scheduler | None = None
        self._child = False

    def after_fork(self) -> None:
        self._child = True

    def on_worker_start(self, worker: RunningWorker) -> None:
        if self._child or self.scheduler is not None:
            return
        self.scheduler = Scheduler(self.app)
        threading.Thread(target=self.scheduler.run, name="stalkd-scheduler", daemon=True).start()

    def on_worker_stop(self, worker: RunningWorker) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()

