"""The SQL results backend against SQLite and a real PostgreSQL cluster (started and stopped by
PID for the session, tests/outbox/pg_cluster.py): replace, expiry by an injected clock, purge,
namespaces, and concurrent writers of one id."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from stalkd.worker.sqlresults import PURGE_EVERY, SqlResults


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    if request.param == "sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path}/results.db")
    else:
        engine = sa.create_engine(request.getfixturevalue("postgres_url"))
    yield engine
    engine.dispose()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _backend(db: sa.Engine, clock: Clock, namespace: str = "") -> SqlResults:
    return SqlResults(db, table_name=f"results_{uuid.uuid4().hex[:8]}", namespace=namespace, clock=clock)


def test_store_replace_and_expire(db: sa.Engine) -> None:
    clock = Clock(1000.0)
    r = _backend(db, clock)
    r.store(1, b"first", ttl=60)
    r.store(1, b"second", ttl=10)  # replaces, with its own time-to-live
    r.store(2, b"\x00binary\xff", ttl=60)
    assert r.fetch(1) == b"second" and r.fetch(2) == b"\x00binary\xff" and r.fetch(3) is None
    clock.now = 1010.0
    assert r.fetch(1) is None and r.fetch(2) == b"\x00binary\xff"


def test_purge_deletes_expired_rows_and_store_runs_it_once_a_minute(db: sa.Engine) -> None:
    clock = Clock(0.0)
    r = _backend(db, clock)
    count = sa.select(sa.func.count()).select_from(r.table)
    r.store(1, b"a", ttl=5)  # the first store purges (nothing yet)
    r.store(2, b"b", ttl=5)
    clock.now = 10.0
    r.store(3, b"c", ttl=100)  # less than a minute since the last purge: rows stay
    with db.connect() as conn:
        assert conn.execute(count).scalar() == 3
    clock.now = PURGE_EVERY + 1
    r.store(4, b"d", ttl=100)
    with db.connect() as conn:
        assert conn.execute(count).scalar() == 2
    assert r.purge() == 0


def test_namespaces_keep_the_same_job_id_apart(db: sa.Engine) -> None:
    clock = Clock(0.0)
    a = _backend(db, clock, namespace="server-a")
    b = SqlResults(db, table_name=a.table.name, namespace="server-b", clock=clock)
    a.store(1, b"from a", ttl=60)
    b.store(1, b"from b", ttl=60)
    assert (a.fetch(1), b.fetch(1)) == (b"from a", b"from b")


def test_concurrent_stores_of_one_id_leave_one_whole_value(db: sa.Engine) -> None:
    r = _backend(db, Clock(0.0))
    values = [bytes([i]) * 1000 for i in range(8)]
    errors: list[BaseException] = []

    def write(v: bytes) -> None:
        try:
            for _ in range(5):
                r.store(9, v, ttl=60)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(v,)) for v in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if db.dialect.name == "sqlite":
        # SQLite serialises writers; a busy error would be the only acceptable failure
        assert all(isinstance(e, sa.exc.OperationalError) for e in errors)
    else:
        assert errors == []
    assert r.fetch(9) in values
