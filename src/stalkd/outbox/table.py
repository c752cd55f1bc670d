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


_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg"}


def _dialect(name: str) -> sa.Dialect:
    """SQLAlchemy's dialect for a database kind, to compile statements without an engine."""
    if name not in _DIALECTS:
        raise ValueError(f"outbox: no dialect {name!r} (one of {', '.join(_DIALECTS)})")
    return sa.create_mock_engine(sa.make_url(_DIALECTS[name] + "://"), lambda *a: None).dialect


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

    def create_sql(self, dialect: str) -> list[str]:
        """The statements that create the table and its index in ``dialect`` ("sqlite" or
        "postgresql"), for another library's schema tool (a Django migration's ``RunSQL``)."""
        d = _dialect(dialect)
        return [str(sa.schema.CreateTable(self.table).compile(dialect=d)).strip(),
                *(str(sa.schema.CreateIndex(i).compile(dialect=d)) for i in self.table.indexes)]

    def put_task(self, conn: sa.Connection, task: Task[Any], payload: Any, *, delay: int = 0,
                 priority: int | None = None, ttr: int | None = None) -> int:
        """Like ``task.put`` (same validation and envelope), but inside ``conn``'s transaction.
        Unique keys and dependencies are not supported here (they need the server at put time)."""
        real_ttr = task.ttr if ttr is None else ttr
        return self.put(conn, task.tube, task.encode(payload, ttr=real_ttr), delay=delay,
                        priority=task.priority if priority is None else priority, ttr=real_ttr)

    def put_dbapi(self, cursor: Any, dialect: str, tube: str, body: bytes | str, *,
                  priority: int = DEFAULT_PRIORITY, delay: int = 0, ttr: int = 120) -> int:
        """``put`` on a DB-API cursor of another library's connection, inside whatever
        transaction that connection has open (Django's ``connection.cursor()``, for example:
        ``dialect`` is then ``connection.vendor``, "sqlite" or "postgresql"). The statement
        is this table's insert compiled by SQLAlchemy for ``dialect``, with its value
        conversions, so the relay reads the row back as if ``put`` had written it."""
        if not 1 <= len(tube) <= 200:
            raise ValueError(f"outbox: tube name must be 1..200 bytes, got {tube!r}")
        d = _dialect(dialect)
        values = {"tube": tube, "body": body.encode() if isinstance(body, str) else bytes(body),
                  "priority": priority, "delay": delay, "ttr": ttr, "created_at": _now()}
        stmt = self.table.insert().values(**values).returning(self.table.c.id)
        compiled = stmt.compile(dialect=d)
        params = compiled.construct_params()
        for key, value in params.items():
            process = compiled.binds[key].type.dialect_impl(d).bind_processor(d)
            params[key] = value if process is None else process(value)
        if compiled.positiontup is not None:  # qmark dialects (sqlite) take a sequence
            cursor.execute(str(compiled), [params[k] for k in compiled.positiontup])
        else:
            cursor.execute(str(compiled), params)
        return int(cursor.fetchone()[0])

    def put_task_dbapi(self, cursor: Any, dialect: str, task: Task[Any], payload: Any, *,
                       delay: int = 0, priority: int | None = None, ttr: int | None = None) -> int:
        """``put_task`` on a DB-API cursor (see ``put_dbapi``)."""
        real_ttr = task.ttr if ttr is None else ttr
        return self.put_dbapi(cursor, dialect, task.tube, task.encode(payload, ttr=real_ttr),
                              delay=delay, ttr=real_ttr,
                              priority=task.priority if priority is None else priority)

    def pending(self, conn: sa.Connection) -> int:
        """Rows committed but not yet sent."""
        q = sa.select(sa.func.count()).select_from(self.table).where(self.table.c.sent_at.is_(None))
        return int(conn.execute(q).scalar_one())

    def purge(self, conn: sa.Connection, *, sent_before: dt.datetime) -> int:
        """Delete rows sent before ``sent_before``; returns how many."""
        t = self.table
        result = conn.execute(t.delete().where(t.c.sent_at.is_not(None), t.c.sent_at < sent_before))
        return int(result.rowcount)
