"""The outbox table and the producer side: write jobs inside the application's own transaction.

>>> import sqlalchemy as sa
>>> engine = sa.create_engine("sqlite://")
>>> outbox = Outbox()
>>> outbox.create(engine)
>>> with engine.begin() as conn:           # the application's transaction
...     row_id = outbox.put(conn, "emails", b'{"to": "a@b"}')
>>> row_id
1

Ensures: a row exists iff the application's transaction committed; rows are never updated
except by the relay (``sent_at``/``job_id``/``last_error``) and never deleted except by ``purge``.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

if TYPE_CHECKING:
    from stalkd.worker.task import Task

__all__ = ["Outbox", "DEFAULT_PRIORITY"]

DEFAULT_PRIORITY = 2**31


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Outbox:
    """The ``stalkd_outbox`` table (name configurable) in ``metadata`` (a new one by default)."""

    def __init__(self, metadata: sa.MetaData | None = None, *,
                 table_name: str = "stalkd_outbox") -> None:
        self.metadata = metadata if metadata is not None else sa.MetaData()
        self.table = sa.Table(
            table_name, self.metadata,
            sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                      primary_key=True, autoincrement=True),
            sa.Column("tube", sa.String(200), nullable=False),
            sa.Column("body", sa.LargeBinary(), nullable=False),
            sa.Column("priority", sa.BigInteger(), nullable=False),
            sa.Column("delay", sa.Integer(), nullable=False),
            sa.Column("ttr", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, default=_now),
            sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("job_id", sa.BigInteger(), nullable=True),
            sa.Column("last_error", sa.Text(), nullable=True),
            # The relay scans unsent rows in id order; a partial index keeps that cheap.
            sa.Index(f"{table_name}_unsent", "id", postgresql_where=sa.text("sent_at IS NULL"),
                     sqlite_where=sa.text("sent_at IS NULL")),
        )

    def create(self, bind: sa.Engine | sa.Connection) -> None:
        """Create the table (and its index) if missing."""
        self.table.create(bind, checkfirst=True)

    def put(self, conn: sa.Connection, tube: str, body: bytes | str, *,
            priority: int = DEFAULT_PRIORITY, delay: int = 0, ttr: int = 120) -> int:
        """Queue a job as part of ``conn``'s current transaction; returns the outbox row id.
        It reaches the server only if that transaction commits. ``delay`` counts from the
        moment the relay sends the row."""
        if not 1 <= len(tube) <= 200:
            raise ValueError(f"outbox: tube name must be 1..200 bytes, got {tube!r}")
        data = body.encode() if isinstance(body, str) else bytes(body)
        result = conn.execute(self.table.insert().values(
            tube=tube, body=data, priority=priority, delay=delay, ttr=ttr))
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])

    def put_task(self, conn: sa.Connection, task: Task[Any], payload: Any, *, delay: int = 0,
                 priority: int | None = None, ttr: int | None = None) -> int:
        """Like ``task.put`` (same validation and envelope), but inside ``conn``'s transaction.
        Unique keys and dependencies are not supported here (they need the server at put time)."""
        real_ttr = task.ttr if ttr is None else ttr
        return self.put(conn, task.tube, task.encode(payload, ttr=real_ttr), delay=delay,
                        priority=task.priority if priority is None else priority, ttr=real_ttr)

    def pending(self, conn: sa.Connection) -> int:
        """Rows committed but not yet sent."""
        q = sa.select(sa.func.count()).select_from(self.table).where(self.table.c.sent_at.is_(None))
        return int(conn.execute(q).scalar_one())

    def purge(self, conn: sa.Connection, *, sent_before: dt.datetime) -> int:
        """Delete rows sent before ``sent_before``; returns how many."""
        t = self.table
        result = conn.execute(t.delete().where(t.c.sent_at.is_not(None), t.c.sent_at < sent_before))
        return int(result.rowcount)
