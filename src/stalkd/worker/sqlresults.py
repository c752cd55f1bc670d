"""A results backend in a SQL database, on SQLAlchemy Core (PostgreSQL, SQLite): for Debian's
beanstalkd, which keeps no results, or to keep them beside the application's data.

>>> from stalkd.worker.sqlresults import SqlResults
>>> r = SqlResults("sqlite://", clock=lambda: 100.0)
>>> r.store(7, b"out", ttl=60)
>>> r.fetch(7), r.fetch(8)
(b'out', None)
>>> r.clock = lambda: 160.0
>>> r.fetch(7) is None
True

``pip install 'stalkd[sql]'``. A SQLite database named by URL is put in WAL mode (writers from
several worker threads then wait for each other instead of failing). The table (``stalkd_results`` unless named) is created if
missing. Rows are keyed by ``(namespace, job_id)``: job ids are per server, so apps whose jobs
live on different servers but share a database give each its own ``namespace``. Expired rows
are never returned, and are deleted by ``purge()``, which ``store`` runs once a minute at most.

Ensures: ``fetch`` returns the data of the latest ``store`` for that id while its time-to-live
lasts, and None after it; a ``store`` replaces an earlier one in one statement (an upsert).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

if TYPE_CHECKING:
    from stalkd.client import Client

__all__ = ["SqlResults"]

PURGE_EVERY = 60.0  # seconds between the expired-row deletes that store() runs


def _sqlite_wal(dbapi_conn: Any, _record: Any) -> None:
    # Workers store from several threads: in SQLite's WAL mode a writer blocks no reader and
    # commits append to one file (each still fsynced: synchronous stays FULL); writers wait
    # for each other up to the busy timeout instead of failing at once.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


class SqlResults:
    """Results in a table of a SQLAlchemy database (URL or ``Engine``)."""

    def __init__(self, db: str | sa.Engine, *, table_name: str = "stalkd_results",
                 namespace: str = "", clock: Callable[[], float] = time.time) -> None:
        self.engine = sa.create_engine(db) if isinstance(db, str) else db
        if self.engine.dialect.name == "sqlite" and isinstance(db, str):
            sa.event.listen(self.engine, "connect", _sqlite_wal)
        self.namespace = namespace
        self.clock = clock
        self.metadata = sa.MetaData()
        self.table = sa.Table(
            table_name, self.metadata,
            sa.Column("namespace", sa.String(200), primary_key=True),
            sa.Column("job_id", sa.BigInteger(), primary_key=True, autoincrement=False),
            sa.Column("expires_at", sa.Float(), nullable=False),  # Unix seconds
            sa.Column("data", sa.LargeBinary(), nullable=False),
            sa.Index(f"{table_name}_expires", "expires_at"),
        )
        self.metadata.create_all(self.engine)
        self._last_purge = float("-inf")
        self._lock = threading.Lock()

    def _upsert(self, row: dict[str, Any]) -> Any:
        name = self.engine.dialect.name
        keys = ["namespace", "job_id"]
        new = {"expires_at": row["expires_at"], "data": row["data"]}
        if name == "postgresql":
            pg = postgresql.insert(self.table).values(**row)
            return pg.on_conflict_do_update(index_elements=keys, set_=new)
        if name == "sqlite":
            lite = sqlite.insert(self.table).values(**row)
            return lite.on_conflict_do_update(index_elements=keys, set_=new)
        raise NotImplementedError(f"SqlResults supports PostgreSQL and SQLite, not {name}")

    def store(self, job_id: int, data: bytes, ttl: float, *, via: Client | None = None) -> None:
        now = self.clock()
        row = {"namespace": self.namespace, "job_id": job_id, "expires_at": now + ttl, "data": bytes(data)}
        with self.engine.begin() as conn:
            conn.execute(self._upsert(row))
        with self._lock:
            due = now - self._last_purge >= PURGE_EVERY
            if due:
                self._last_purge = now
        if due:
            self.purge()

    def fetch(self, job_id: int) -> bytes | None:
        t = self.table
        q = sa.select(t.c.data).where(t.c.namespace == self.namespace, t.c.job_id == job_id,
                                      t.c.expires_at > self.clock())
        with self.engine.connect() as conn:
            data = conn.execute(q).scalar_one_or_none()
        return None if data is None else bytes(data)

    def purge(self) -> int:
        """Delete the expired rows (of every namespace); how many."""
        with self.engine.begin() as conn:
            n = conn.execute(sa.delete(self.table).where(self.table.c.expires_at <= self.clock())).rowcount
        return int(n or 0)
