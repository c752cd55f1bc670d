"""The relay: moves committed outbox rows to the queue.

Each batch runs in one database transaction: select the oldest unsent rows (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL, so several relays share the work), ``put`` each on the server, then mark
them sent (``sent_at``, ``job_id``) and commit.

Delivery guarantee
------------------
* Never loses a committed row: a row is marked sent only in the transaction that follows its
  successful ``put`` (INSERTED means the server has it; with stalkd's ``always`` policy, on disk).
* At-least-once: if the relay dies after a ``put`` and before its batch's commit, those rows
  stay unsent and are put again by the next run. Duplicates are bounded by ``batch_size`` per
  crash, and only a crash in that window causes them, so consumers must be idempotent (as yoltq
  asks of its consumers). A put that fails marks the rows already put in the batch, records the
  error on the failing row (``last_error``) and raises; nothing is skipped.
* SQLite has no row locks: run one relay per SQLite database.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, Protocol

import sqlalchemy as sa

from stalkd.client import Client
from stalkd.outbox.table import Outbox

__all__ = ["Relay", "Sender", "Stop"]


class Stop(Protocol):
    """What ``run`` watches: a ``threading.Event``, or ``stalkd.worker.stopflag.StopFlag`` when a
    signal handler sets it (``Event.set`` in a handler can deadlock on the lock ``wait`` holds)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


log = logging.getLogger("stalkd.outbox")


class Sender(Protocol):
    """Where rows go: ``put`` returning the job id (``stalkd.client.Client`` fits)."""

    def put(self, body: bytes, *, priority: int, delay: int, ttr: int, tube: str) -> int: ...

    def close(self) -> None: ...


class Relay:
    """Moves rows from ``outbox`` in ``engine`` to the server at ``address``.

    ``after_put(row_id, job_id)`` is called after each put, before the batch commits (an
    observation hook: tests use it to crash the relay inside the re-send window).

    >>> import sqlalchemy as sa
    >>> relay = Relay(sa.create_engine("sqlite://"), Outbox(), address="127.0.0.1:11300")
    >>> relay.batch_size
    100
    """

    def __init__(self, engine: sa.Engine, outbox: Outbox, *, address: str = "127.0.0.1:11300",
                 batch_size: int = 100, sender: Sender | None = None,
                 after_put: Callable[[int, int], None] | None = None,
                 clock: Callable[[], dt.datetime] | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.engine = engine
        self.outbox = outbox
        self.address = address
        self.batch_size = batch_size
        self._sender = sender
        self.after_put = after_put
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.sent_total = 0

    def _get_sender(self) -> Sender:
        if self._sender is None:
            self._sender = Client(self.address)
        return self._sender

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    def run_once(self) -> int:
        """Send one batch; returns how many rows were sent (0: nothing pending)."""
        t = self.outbox.table
        query = (sa.select(t.c.id, t.c.tube, t.c.body, t.c.priority, t.c.delay, t.c.ttr)
                 .where(t.c.sent_at.is_(None)).order_by(t.c.id).limit(self.batch_size)
                 .with_for_update(skip_locked=True))
        with self.engine.begin() as tx:
            rows = tx.execute(query).all()
            if not rows:
                return 0
            sender = self._get_sender()
            sent: list[dict[str, Any]] = []
            failure: BaseException | None = None
            for row in rows:
                try:
                    job_id = sender.put(row.body, priority=row.priority, delay=row.delay,
                                        ttr=row.ttr, tube=row.tube)
                except Exception as exc:
                    failure = exc
                    tx.execute(t.update().where(t.c.id == row.id)
                               .values(last_error=f"{type(exc).__name__}: {exc}"[:1000]))
                    break
                if self.after_put is not None:
                    self.after_put(row.id, job_id)
                sent.append({"row_id": row.id, "job_id": job_id})
            if sent:
                now = self.clock()
                tx.execute(t.update().where(t.c.id == sa.bindparam("row_id"))
                           .values(sent_at=now, job_id=sa.bindparam("job_id"), last_error=None),
                           sent)
        self.sent_total += len(sent)
        if failure is not None:
            failed_row = rows[len(sent)].id
            self.close()  # a broken connection is not reused
            raise RuntimeError(f"outbox relay: put of row {failed_row} to {self.address} "
                               f"failed after {len(sent)} sent: {failure}") from failure
        return len(sent)

    def run(self, stop: Stop, *, idle_wait: float = 0.5,
            error_wait: float = 2.0) -> None:
        """Relay until ``stop`` is set: back-to-back batches while rows are pending, polling
        every ``idle_wait`` seconds when idle, ``error_wait`` after a failure."""
        try:
            while not stop.is_set():
                try:
                    if self.run_once() == 0:
                        stop.wait(idle_wait)
                except (RuntimeError, OSError, sa.exc.OperationalError) as exc:
                    # Server or database away: nothing was marked, so nothing is lost; retry.
                    log.warning("%s; retrying in %.1fs", exc, error_wait)
                    stop.wait(error_wait)
        finally:
            self.close()
