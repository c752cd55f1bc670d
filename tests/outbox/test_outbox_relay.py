"""The transactional outbox against a real queue server (Debian's beanstalkd) and real databases
(SQLite files and a throwaway PostgreSQL cluster). The queue is observed with greenstalk, a
client independent of the code under test."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import greenstalk
import pytest
import sqlalchemy as sa

from stalkd.outbox import Outbox, Relay
from support import wait_until

pytestmark = pytest.mark.beanstalkd


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'app.db'}"
        return
    base: str = request.getfixturevalue("postgres_url")
    # A fresh table name per test keeps tests independent on the shared cluster.
    yield base


@pytest.fixture
def table_name(request: pytest.FixtureRequest) -> str:
    return "outbox_" + str(abs(hash(request.node.nodeid)) % 10**8)


def drain(address: str, tube: str) -> list[tuple[int, bytes]]:
    """Every ready job in ``tube`` (reserved and deleted), in queue order."""
    host, port = address.split(":")
    out: list[tuple[int, bytes]] = []
    with greenstalk.Client((host, int(port)), encoding=None, watch=tube) as c:
        while True:
            try:
                job = c.reserve(timeout=0)
            except greenstalk.TimedOutError:
                return out
            out.append((job.id, bytes(job.body)))
            c.delete(job)


def setup(db_url: str, table_name: str) -> tuple[sa.Engine, Outbox, sa.Table]:
    engine = sa.create_engine(db_url)
    outbox = Outbox(table_name=table_name)
    orders = sa.Table(table_name + "_orders", outbox.metadata,
                      sa.Column("id", sa.Integer, primary_key=True))
    outbox.metadata.create_all(engine)
    return engine, outbox, orders


def test_only_committed_rows_reach_the_queue(beanstalkd: Any, db_url: str, table_name: str) -> None:
    engine, outbox, orders = setup(db_url, table_name)
    # Given two committed business transactions and one rolled back
    for i in (1, 2):
        with engine.begin() as conn:
            conn.execute(orders.insert().values(id=i))
            outbox.put(conn, "orders", f"order {i}".encode(), ttr=30)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(orders.insert().values(id=3))
        outbox.put(conn, "orders", b"order 3")
        raise RuntimeError("payment failed: roll back")
    # When the relay runs
    relay = Relay(engine, outbox, address=beanstalkd.address)
    try:
        assert relay.run_once() == 2
        assert relay.run_once() == 0
    finally:
        relay.close()
    # Then exactly the committed jobs are on the server, in commit order, and marked sent
    jobs = drain(beanstalkd.address, "orders")
    assert [b for _, b in jobs] == [b"order 1", b"order 2"]
    with engine.connect() as conn:
        rows = conn.execute(sa.select(outbox.table.c.id, outbox.table.c.job_id)
                            .order_by(outbox.table.c.id)).all()
        assert [r.job_id for r in rows] == [j for j, _ in jobs]
        assert outbox.pending(conn) == 0


def test_relay_crash_between_put_and_mark_loses_nothing(beanstalkd: Any, db_url: str,
                                                        table_name: str) -> None:
    engine, outbox, _ = setup(db_url, table_name)
    n = 12
    with engine.begin() as conn:
        for i in range(n):
            outbox.put(conn, "crash", f"job {i}".encode())
    # Given a relay process that is SIGKILLed right after its 3rd put of a 5-row batch
    # (the batch's "mark sent" transaction never commits)
    script = textwrap.dedent(f"""
        import os, signal, sqlalchemy as sa
        from stalkd.outbox import Outbox, Relay
        puts = 0
        def after_put(row_id, job_id):
            global puts
            puts += 1
            if puts == 8:   # first batch of 5 committed, 3 rows into the second
                os.kill(os.getpid(), signal.SIGKILL)
        relay = Relay(sa.create_engine({db_url!r}), Outbox(table_name={table_name!r}),
                      address={beanstalkd.address!r}, batch_size=5, after_put=after_put)
        while relay.run_once():
            pass
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    with engine.connect() as conn:
        assert outbox.pending(conn) == n - 5  # the second batch rolled back
    # When a new relay runs to completion
    relay = Relay(engine, outbox, address=beanstalkd.address, batch_size=5)
    try:
        while relay.run_once():
            pass
    finally:
        relay.close()
    # Then every committed row is on the server; only the 3 rows put inside the crash window
    # were sent twice
    bodies = [b for _, b in drain(beanstalkd.address, "crash")]
    assert sorted(set(bodies)) == sorted(f"job {i}".encode() for i in range(n))
    dupes = sorted(b for b in set(bodies) if bodies.count(b) > 1)
    assert dupes == [b"job 5", b"job 6", b"job 7"]
    assert len(bodies) == n + 3


class FlakySender:
    """Stands in for the queue server (a true boundary): accepts ``ok`` puts, then fails."""

    def __init__(self, ok: int) -> None:
        self.ok = ok
        self.got: list[bytes] = []

    def put(self, body: bytes, *, priority: int, delay: int, ttr: int, tube: str) -> int:
        if len(self.got) >= self.ok:
            raise ConnectionResetError("server went away")
        self.got.append(body)
        return len(self.got)

    def close(self) -> None:
        pass


def test_failed_put_marks_what_was_sent_and_keeps_the_rest(tmp_path: Path) -> None:
    engine, outbox, _ = setup(f"sqlite:///{tmp_path / 'a.db'}", "outbox")
    with engine.begin() as conn:
        for i in range(4):
            outbox.put(conn, "t", f"{i}".encode())
    relay = Relay(engine, outbox, sender=FlakySender(ok=2), batch_size=10)
    # When the server fails on the third put
    with pytest.raises(RuntimeError, match=r"put of row 3 to .* failed after 2 sent"):
        relay.run_once()
    # Then rows 1-2 are marked sent, row 3 carries the error, rows 3-4 are still pending
    with engine.connect() as conn:
        rows = conn.execute(sa.select(outbox.table).order_by(outbox.table.c.id)).all()
    assert [r.sent_at is not None for r in rows] == [True, True, False, False]
    assert rows[2].last_error == "ConnectionResetError: server went away"


@pytest.mark.postgres
def test_two_relays_share_the_work_without_duplicates(beanstalkd: Any, postgres_url: str,
                                                      table_name: str) -> None:
    engine, outbox, _ = setup(postgres_url, table_name)
    n = 200
    with engine.begin() as conn:
        for i in range(n):
            outbox.put(conn, "shared", f"{i}".encode())
    # When two relays run at once (SKIP LOCKED hands each batch to one of them)
    relays = [Relay(engine, outbox, address=beanstalkd.address, batch_size=7) for _ in range(2)]

    def work(r: Relay) -> None:
        while r.run_once():
            pass

    threads = [threading.Thread(target=work, args=(r,)) for r in relays]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for r in relays:
        r.close()
    # Then each row was sent exactly once
    bodies = [b for _, b in drain(beanstalkd.address, "shared")]
    assert sorted(bodies) == sorted(f"{i}".encode() for i in range(n))
    assert sum(r.sent_total for r in relays) == n


def test_task_rows_run_on_a_worker_and_the_relay_loop_stops(beanstalkd: Any, tmp_path: Path) -> None:
    from stalkd.worker import App, make_worker

    engine, outbox, orders = setup(f"sqlite:///{tmp_path / 'a.db'}", "outbox")
    app = App(beanstalkd.address, middleware=[])
    done: list[dict[str, int]] = []
    task = app.task(done.append, name="ship", tube="ship")
    # Given a task payload written in the application's transaction
    with engine.begin() as conn:
        conn.execute(orders.insert().values(id=1))
        outbox.put_task(conn, task, {"order": 1})
    # When the relay loop and a worker run
    stop = threading.Event()
    relay = Relay(engine, outbox, address=beanstalkd.address)
    relay_thread = threading.Thread(target=relay.run, args=(stop,), kwargs={"idle_wait": 0.05})
    worker = make_worker(app, concurrency=1)
    worker_thread = threading.Thread(target=worker.run)
    relay_thread.start()
    worker_thread.start()
    try:
        wait_until(lambda: done, "the task run by the worker", timeout=10, step=0.05)
    finally:
        stop.set()
        worker.stop(now=True)
        relay_thread.join(timeout=10)
        worker_thread.join(timeout=10)
    # Then the task ran with the payload, and both loops stopped
    assert done == [{"order": 1}]
    assert not relay_thread.is_alive() and not worker_thread.is_alive()


def test_relay_waits_for_an_absent_server_then_delivers(tmp_path: Path, held_port: int,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    from support import start_beanstalkd

    engine, outbox, _ = setup(f"sqlite:///{tmp_path / 'a.db'}", "outbox")
    with engine.begin() as conn:
        outbox.put(conn, "late", b"hello")
    port = held_port  # refuses connections until the server starts on it
    stop = threading.Event()
    relay = Relay(engine, outbox, address=f"127.0.0.1:{port}")
    t = threading.Thread(target=relay.run, args=(stop,),
                         kwargs={"idle_wait": 0.05, "error_wait": 0.1})
    # Given a relay started while no server listens
    t.start()
    server = None
    try:
        # Then it fails to connect, logs it, keeps the row and keeps trying
        with caplog.at_level("WARNING", "stalkd.outbox"):
            for _ in range(200):
                if "retrying" in caplog.text:
                    break
                stop.wait(0.05)
        assert f"127.0.0.1:{port}" in caplog.text and "retrying" in caplog.text
        with engine.connect() as conn:
            assert outbox.pending(conn) == 1
        # When the server comes up, Then the row is delivered and marked sent
        server = start_beanstalkd(port=port)
        for _ in range(400):
            with engine.connect() as conn:
                if outbox.pending(conn) == 0:
                    break
            stop.wait(0.05)
        assert [b for _, b in drain(f"127.0.0.1:{port}", "late")] == [b"hello"]
    finally:
        stop.set()
        t.join(timeout=10)
        if server is not None:
            server.stop()
    assert not t.is_alive()


def test_purge_deletes_only_rows_sent_before_the_cutoff(tmp_path: Path) -> None:
    import datetime as dt

    engine, outbox, _ = setup(f"sqlite:///{tmp_path / 'a.db'}", "outbox")
    with engine.begin() as conn:
        for i in range(3):
            outbox.put(conn, "t", b"%d" % i)
    times = iter([dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 3, tzinfo=dt.UTC)])
    relay = Relay(engine, outbox, sender=FlakySender(ok=99), batch_size=1, clock=lambda: next(times))
    assert relay.run_once() == 1 and relay.run_once() == 1
    with engine.begin() as conn:
        assert outbox.purge(conn, sent_before=dt.datetime(2026, 1, 2, tzinfo=dt.UTC)) == 1
        left = conn.execute(sa.select(outbox.table.c.id).order_by(outbox.table.c.id)).scalars().all()
        # Row 1 (sent on Jan 1) is gone; row 2 (sent Jan 3) and unsent row 3 stay
        assert left == [2, 3]


def test_relay_process_delivers_and_stops_on_sigterm(beanstalkd: Any, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'app.db'}"
    engine, outbox, _ = setup(db, "stalkd_outbox")
    with engine.begin() as conn:
        outbox.put(conn, "proc", b"from the relay process")
    from support import popen_logged

    log = tmp_path / "relay.log"
    proc = popen_logged([sys.executable, "-m", "stalkd.outbox", "--db", db,
                         "--address", beanstalkd.address, "--idle-wait", "0.05"], log)
    try:
        for _ in range(400):
            with engine.connect() as conn:
                if outbox.pending(conn) == 0:
                    break
            threading.Event().wait(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [b for _, b in drain(beanstalkd.address, "proc")] == [b"from the relay process"]
    assert "relay stopped after sending 1 rows" in log.read_text()
