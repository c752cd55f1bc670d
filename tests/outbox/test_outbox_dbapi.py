"""The outbox on another library's DB-API connection (what the Django recipe uses): rows
written by ``put_dbapi`` in a plain sqlite3 transaction read back exactly as ``put``'s, and
``create_sql`` makes the same table as ``create``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from stalkd.outbox import Outbox


def test_put_dbapi_rows_match_put_rows_and_follow_the_transaction(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    outbox = Outbox()
    raw = sqlite3.connect(path)
    for sql in outbox.create_sql("sqlite"):  # the table, made by "another library"
        raw.execute(sql)
    raw.commit()
    cur = raw.cursor()
    outbox.put_dbapi(cur, "sqlite", "gone", b"rolled back")
    raw.rollback()
    first = outbox.put_dbapi(cur, "sqlite", "emails", '{"to": "a@b"}', priority=5, delay=3,
                             ttr=60)
    raw.commit()
    raw.close()
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        second = outbox.put(conn, "emails", b'{"to": "a@b"}', priority=5, delay=3, ttr=60)
    cols = ("tube", "body", "priority", "delay", "ttr", "sent_at", "job_id", "last_error")
    t = outbox.table
    with engine.connect() as conn:
        rows = conn.execute(sa.select(t.c.id, t.c.created_at, *(t.c[c] for c in cols))
                            .order_by(t.c.id)).all()
        assert outbox.pending(conn) == 2
    assert [r.id for r in rows] == [first, second]  # the rolled-back row took no place
    assert tuple(rows[0])[2:] == tuple(rows[1])[2:]
    assert rows[0].created_at <= rows[1].created_at  # a datetime read back, not a string
    engine.dispose()


def test_put_dbapi_names_the_dialects_it_knows(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no dialect 'mysql'"):
        Outbox().put_dbapi(sqlite3.connect(tmp_path / "x.db").cursor(), "mysql", "t", b"x")
