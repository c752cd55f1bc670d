"""Which worker runs which job (Celery's ``inspect active``): every worker process announces
itself, and ``stalkd workers`` lists them with their slots and the jobs they run now.

Kept in the queue server, through the protocol alone (so it works on beanstalkd too): each
worker process has a tube of its own, ``stalkd.workers.<host>.<pid>.<token>``, that

* its presence connection **watches** for as long as the process lives. The server counts the
  watchers (``stats-tube``'s ``current-watching``): when the process dies, even by SIGKILL, its
  connection closes and the count drops to 0 at once, so a dead worker is never listed;
* holds its newest **record**, a delayed job (JSON: host, pid, mode, slots, tubes, start time,
  the running jobs with their task and start time), put again every ``interval`` seconds
  (the previous one deleted). The delay bounds how long a record outlives a frozen process.

``stalkd workers`` reads each such tube's watcher count and record (``peek-delayed``); a tube
nobody watches any more is a dead worker's: its records are deleted, and the tube goes with them.

Ensures: a worker process whose connection is gone is not listed; a listed record is at most
``interval`` seconds old (plus a round trip) while its worker runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

from stalkd.client.errors import BeanstalkError
from stalkd.tubes import WORKERS_TUBE_PREFIX
from stalkd.worker.context import JobContext
from stalkd.worker.middleware.base import Middleware, RunningWorker

log = logging.getLogger("stalkd.worker")

__all__ = ["Presence", "PRESENCE_PREFIX", "list_workers", "describe"]

PRESENCE_PREFIX = WORKERS_TUBE_PREFIX
RECORD_TTR = 60


class Presence(Middleware):
    """Announces this worker process and its running jobs (see the module docstring)."""

    def __init__(self, *, interval: float = 5.0) -> None:
        self.interval = interval
        self._reset()

    def _reset(self) -> None:
        self._running: dict[int, tuple[str, str, float]] = {}  # job id -> task, tube, started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._info: dict[str, Any] = {}
        self._address: str | None = None
        self._timeout = 10.0

    def on_worker_start(self, worker: RunningWorker) -> None:
        app: Any = getattr(worker, "app", None)
        if app is None or app.address is None or hasattr(worker, "children"):
            return  # no server, or the parent of forked children: each child announces itself
        self._address, self._timeout = app.address, app.client_timeout
        host = socket.gethostname()
        self.tube = f"{PRESENCE_PREFIX}{host[:60]}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        self._info = {"host": host, "pid": os.getpid(), "mode": type(worker).__name__,
                      "slots": int(getattr(worker, "concurrency", 1)),
                      "tubes": list(getattr(worker, "tubes", app.tubes)), "started": time.time()}
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="stalkd-presence", daemon=True)
        self._thread.start()

    def after_fork(self) -> None:
        self._reset()  # the parent's thread did not survive the fork; the child announces itself

    def on_worker_stop(self, worker: RunningWorker) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout + 1)
            self._thread = None

    def before_process(self, ctx: JobContext) -> None:
        with self._lock:
            self._running[ctx.job_id] = (ctx.task.name, ctx.tube, time.time())

    def on_handler_exit(self, ctx: JobContext) -> None:
        with self._lock:
            self._running.pop(ctx.job_id, None)

    def record(self, now: float) -> bytes:
        """This process's record as of ``now``."""
        with self._lock:
            jobs = [{"id": jid, "task": task, "tube": tube, "started": started}
                    for jid, (task, tube, started) in sorted(self._running.items())]
        return json.dumps({**self._info, "at": now, "jobs": jobs}).encode()

    def _loop(self) -> None:
        from stalkd.worker.ops import ServerOps

        conn: ServerOps | None = None
        last: int | None = None
        delay = max(1, round(3 * self.interval))
        while True:
            try:
                if conn is None:
                    assert self._address is not None
                    conn = ServerOps(self._address, timeout=self._timeout)
                    conn.watch_only([self.tube])  # the watch is what says "alive"
                    last = None
                new = conn.put(self.tube, self.record(time.time()), 0, delay, RECORD_TTR)
                if last is not None:
                    conn.delete(last)
                last = new
            except BeanstalkError as exc:  # an ACL without the worker role, say: said once
                log.warning("presence: this worker cannot announce itself (%s); `stalkd workers` "
                            "will not list it (docs/access-control.md: the worker role grants "
                            "its presence tube)", exc)  # fmt: skip
                break
            except OSError as exc:
                log.warning("presence: could not announce this worker (%s); trying again", exc)
                if conn is not None:
                    with contextlib.suppress(OSError):
                        conn.abort()
                conn = None
            if self._stop.wait(self.interval):
                break
        if conn is not None:
            with contextlib.suppress(OSError):
                if last is not None:
                    conn.delete(last)  # stopped cleanly: gone at once
                conn.close()


def list_workers(address: str, *, timeout: float = 10.0, now: float | None = None) -> list[dict[str, Any]]:
    """The live worker processes announced on the server at ``address``, by host and pid;
    a dead worker's records found on the way are deleted."""
    from stalkd.client import errors
    from stalkd.client.sync import Client

    now = time.time() if now is None else now
    out: list[dict[str, Any]] = []
    with Client(address, timeout=timeout) as c:
        for tube in c.list_tubes():
            if not tube.startswith(PRESENCE_PREFIX):
                continue
            try:
                watched = int(str(c.stats_tube(tube).get("current-watching", 0)))
            except errors.NotFound:
                continue  # gone meanwhile
            c.use(tube)
            if not watched:
                _sweep(c)
                continue
            try:
                rec = describe(c.peek_delayed().body, now)
            except errors.NotFound:
                continue  # announced its tube, not yet its first record
            if rec is not None:
                out.append(rec)
    out.sort(key=lambda r: (str(r.get("host")), int(r.get("pid", 0))))
    return out


def describe(record: bytes, now: float) -> dict[str, Any] | None:
    """A worker's record as listed: with how long each job has run and how old the record
    is, as of ``now``; None for a body that is not a record.

    >>> describe(b'{"pid": 7, "at": 9.0, "jobs": [{"id": 3, "started": 4.0}]}', 10.0)
    {'pid': 7, 'at': 9.0, 'jobs': [{'id': 3, 'started': 4.0, 'running_s': 6.0}], 'age_s': 1.0}
    """
    try:
        rec = json.loads(record)
        for job in rec.get("jobs", []):
            job["running_s"] = max(0.0, round(now - float(job.get("started", now)), 1))
        rec["age_s"] = max(0.0, round(now - float(rec.get("at", now)), 1))
    except (ValueError, TypeError, AttributeError):
        return None
    return rec if isinstance(rec, dict) else None


def _sweep(c: Any) -> None:
    """Delete every record of the tube ``c`` uses (a dead worker's), so the tube goes too."""
    from stalkd.client import errors

    for peek in (c.peek_delayed, c.peek_ready, c.peek_buried):
        for _ in range(16):  # a worker keeps one record, two for an instant
            try:
                c.delete(peek().id)
            except errors.NotFound:
                break
