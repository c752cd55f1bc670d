"""Producing jobs: run-at times and timedelta delays, cancel, ``await task.aput``, payload types
the JSON serializer takes (and a clear error for the others), and ``Task`` typed by its payload
so ``mypy --strict`` checks ``put`` arguments."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import decimal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from worker_probe import Probe, queue_server

from stalkd.worker import App, ValidationError

_FIXTURES = (queue_server,)


@pytest.fixture
def probe(server: Any) -> Any:
    p = Probe(server.address)
    yield p
    p.close()


@dataclasses.dataclass
class Order:
    id: uuid.UUID
    total: decimal.Decimal
    placed: dt.datetime


def test_json_payloads_take_dates_uuids_decimals_and_dataclasses() -> None:
    app = App(middleware=[])
    seen: list[Any] = []
    task = app.task(seen.append, name="t")
    order = Order(uuid.UUID(int=7), decimal.Decimal("10.50"), dt.datetime(2026, 1, 2, 3, 4, 5))
    with app.testing() as t:
        task.put({"order": order, "day": dt.date(2026, 1, 2)})
        t.drain()
        # Then the handler gets their JSON forms, exact
        assert seen == [{"order": {"id": "00000000-0000-0000-0000-000000000007", "total": "10.50",
                                   "placed": "2026-01-02T03:04:05"}, "day": "2026-01-02"}]
        # And what JSON cannot carry is refused at put, naming the type
        with pytest.raises(ValidationError, match="cannot encode set"):
            task.put({"tags": {"a"}})
        assert t.queued == []


def test_put_at_a_time_or_after_a_timedelta_delays_the_job(server: Any, probe: Probe) -> None:
    app = App(server.address, middleware=[])
    task = app.task(lambda p: None, name="later")
    a = task.put(1, delay=dt.timedelta(minutes=5))
    b = task.put(2, at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    c = task.put(3, at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))  # the past: now
    infos = [probe.job(j) for j in (a, b, c)]  # type: ignore[arg-type]
    assert [i["state"] for i in infos if i] == ["delayed", "delayed", "ready"]
    assert infos[0] is not None and infos[0]["delay"] == 300
    assert infos[1] is not None and 3000 < infos[1]["delay"] <= 3600
    with pytest.raises(ValueError, match="not both"):
        task.put(4, delay=5, at=dt.datetime.now(dt.UTC))


def test_cancel_removes_a_waiting_job_and_frees_its_key(server: Any, probe: Probe) -> None:
    # Given a delayed job holding a unique key
    app = App(server.address, middleware=[])
    task = app.task(lambda p: None, name="c")
    job = task.put(1, delay=600, key="order-9")
    dup = task.put(2, key="order-9")
    assert job is not None and dup == job and dup.duplicate  # a handle to the pending one
    # When it is cancelled, Then it is gone and the key is free again
    assert app.cancel(job) is True
    assert probe.job(job) is None
    again = task.put(3, key="order-9")
    assert again is not None and not again.duplicate
    # and the cancelled job's pointer went with its key: a duplicate now names the new job
    dup = task.put(4, key="order-9")
    assert dup == again and dup is not None and dup.duplicate
    assert app.cancel(job) is False
    # And a job a worker holds is not cancelled under it
    probe.c.watch("c")
    held = probe.c.reserve(timeout=1)
    assert held.id == again
    assert app.cancel(again) is False
    assert probe.job(again) is not None


def test_aput_queues_from_asyncio_code(server: Any, probe: Probe) -> None:
    app = App(server.address, middleware=[])
    task = app.task(lambda p: None, name="a", ttr=300)

    async def produce() -> list[int]:
        return list(await asyncio.gather(*(task.aput(i) for i in range(20))))

    ids = asyncio.run(produce())
    assert len(set(ids)) == 20
    info = probe.job(ids[0])
    assert info is not None and (info["tube"], info["ttr"]) == ("a", 300)
    assert probe.count("a", "ready") == 20


def test_mypy_checks_task_put_arguments(tmp_path: Path) -> None:
    # Given tasks typed by their payload, both decorator forms
    src = tmp_path / "typed_tasks.py"
    src.write_text(
        "from stalkd.worker import App\n"
        "app = App()\n"
        "@app.task\n"
        "def plain(n: int) -> None: ...\n"
        "@app.task(tube='t', ttr=60)\n"
        "def configured(s: str) -> None: ...\n"
        "plain.put(1)\n"
        "configured.put('ok')\n"
        "plain.put('one')\n"
        "configured.put_many([1, 2])\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                        "--follow-imports=silent", str(src)],
                       capture_output=True, text=True, timeout=300)
    # Then exactly the two wrong calls (lines 9 and 10) are reported
    errors = [line for line in r.stdout.splitlines() if ": error:" in line]
    assert {e.split("typed_tasks.py:")[1].split(":")[0] for e in errors} == {"9", "10"}, r.stdout
    assert 'incompatible type "str"; expected "int"' in errors[0]
