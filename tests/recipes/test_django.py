"""The Django recipe (docs/recipes.md) run as written: the example project in
examples/django_shop against a real stalkd server, on SQLite and on PostgreSQL. Its code runs in
subprocesses (Django's settings are per process); the queue is observed with greenstalk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import greenstalk
import pytest
import sqlalchemy as sa

from support import ServerProcess

pytest.importorskip("django")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_shop"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shop_env(request: pytest.FixtureRequest, tmp_path: Path, stalkd: ServerProcess) -> dict[str, str]:
    """The example's environment: a fresh database of its own and the test's server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STALKD_", "SHOP_"))}
    env.update(STALKD_ADDR=stalkd.address, DJANGO_SETTINGS_MODULE="shop.settings",
               PYTHONPATH=os.pathsep.join([str(EXAMPLE), env.get("PYTHONPATH", "")]))
    if request.param == "sqlite":
        env["SHOP_DB"] = str(tmp_path / "shop.sqlite3")
    else:
        url = sa.make_url(request.getfixturevalue("postgres_url"))
        name = "shop_" + uuid.uuid4().hex[:12]
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        engine.dispose()
        env.update(SHOP_PG_HOST=str(url.query["host"]), SHOP_PG_NAME=name,
                   SHOP_PG_USER=str(url.username))
    manage(env, "migrate", "-v", "0")
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=EXAMPLE, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def shop(env: dict[str, str], code: str) -> object:
    """Run ``code`` with Django set up; it leaves its answer in ``result`` (JSON)."""
    script = "import django, json\ndjango.setup()\n" + code + "\nprint(json.dumps(result))\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=EXAMPLE, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def receipts(address: str) -> list[dict[str, int]]:
    """The payloads of the ready jobs in the receipts tube, in id order (left in place)."""
    host, port = address.rsplit(":", 1)
    c = greenstalk.Client((host, int(port)), watch="receipts", encoding=None)
    try:
        jobs = []
        while True:
            try:
                job = c.reserve(timeout=0)
            except greenstalk.TimedOutError:
                break
            jobs.append(job)
        payloads = [json.loads(j.body.split(b"\n", 1)[1]) for j in jobs]
        for j in jobs:
            c.release(j)
        return payloads
    finally:
        c.close()


ROLLED_BACK = """
from django.db import transaction
from shop.models import Order
from shop.orders import {fn}
try:
    with transaction.atomic():
        {fn}("gone@example.com")
        raise RuntimeError("the request failed after the order was written")
except RuntimeError:
    pass
result = Order.objects.count()
"""


def test_on_commit_puts_only_committed_orders(shop_env: dict[str, str]) -> None:
    order = shop(shop_env, "from shop.orders import place_order\n"
                           "result = place_order('a@example.com').pk")
    assert receipts(shop_env["STALKD_ADDR"]) == [{"order": order}]
    assert shop(shop_env, ROLLED_BACK.format(fn="place_order")) == 1  # no order, and no job
    assert receipts(shop_env["STALKD_ADDR"]) == [{"order": order}]


def test_outbox_rows_reach_the_queue_through_the_relay_command(shop_env: dict[str, str]) -> None:
    order = shop(shop_env, "from shop.orders import place_order_outbox\n"
                           "result = place_order_outbox('b@example.com').pk")
    assert shop(shop_env, ROLLED_BACK.format(fn="place_order_outbox")) == 1
    assert receipts(shop_env["STALKD_ADDR"]) == []  # written in the database, not yet sent
    out = manage(shop_env, "stalkd_relay", "--once")
    assert "relayed 1 job(s)" in out
    assert receipts(shop_env["STALKD_ADDR"]) == [{"order": order}]
    assert "relayed 0 job(s)" in manage(shop_env, "stalkd_relay", "--once")  # sent once only


def test_the_worker_runs_the_jobs_with_the_orm(shop_env: dict[str, str]) -> None:
    shop(shop_env, "from shop.orders import place_order, place_order_outbox\n"
                   "result = [place_order('c@example.com').pk, "
                   "place_order_outbox('d@example.com').pk]")
    relay = subprocess.Popen([sys.executable, "manage.py", "stalkd_relay", "--idle-wait", "0.05"],
                             cwd=EXAMPLE, env=shop_env, stdout=subprocess.PIPE, text=True)
    worker = subprocess.Popen([sys.executable, "-m", "stalkd.cli", "worker", "shop.worker:app"],
                              cwd=EXAMPLE, env=shop_env, stdout=subprocess.PIPE, text=True,
                              stderr=subprocess.DEVNULL)
    try:
        host, port = shop_env["STALKD_ADDR"].rsplit(":", 1)
        c = greenstalk.Client((host, int(port)))
        deadline = time.monotonic() + 60
        while _completed(c) < 2:
            assert time.monotonic() < deadline, "the worker did not complete both jobs"
            time.sleep(0.05)
        c.close()
    finally:
        for p in (relay, worker):
            p.send_signal(signal.SIGTERM)
        try:
            relay_out, _ = relay.communicate(timeout=30)
            worker_out, _ = worker.communicate(timeout=30)
        finally:
            for p in (relay, worker):  # one that did not stop is not left behind
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert relay.returncode == 0 and "relayed 1 job(s)" in relay_out
    assert worker.returncode == 0
    assert sorted(worker_out.splitlines()) == ["receipt for order 1 to c@example.com",
                                               "receipt for order 2 to d@example.com"]


def _completed(c: greenstalk.Client) -> int:
    """Jobs deleted from the receipts tube (a worker deletes a job once it completed)."""
    return int(c.stats_tube("receipts")["cmd-delete"]) if "receipts" in c.tubes() else 0
