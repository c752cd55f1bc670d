"""Periodic schedules: the pure decision (schedule, last slot, now) -> slots, without clocks; the
ledger's exactly-once claim among several schedulers on the in-memory server with injected
clocks; and two real ``stalkd scheduler`` processes on a real server, then a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from worker_probe import Probe, queue_server, wait_for

from stalkd.worker import App
from stalkd.worker.memory import MemoryServer
from stalkd.worker.schedule import Schedule, decide, slots_between
from stalkd.worker.scheduler import Scheduler, claim_slot, last_slot, ledger_tube

_FIXTURES = (queue_server,)

EVERY_10S = "* * * * * */10"   # croniter: six fields, seconds last


def sched(**kw: Any) -> Schedule:
    return Schedule("s", kw.pop("cron", EVERY_10S), task="t", **kw)


def test_on_time_slots_fire_each_once_in_order() -> None:
    d = decide(sched(grace=60), last=1000, now=1035.9)
    assert d.fire == (1010, 1020, 1030)
    assert d.skip is None and d.wake_at == 1040.0


def test_nothing_is_due_between_slots() -> None:
    assert decide(sched(), last=1030, now=1039.99) == (((), None, 1040.0))


def test_a_slot_is_due_at_its_exact_second() -> None:
    assert decide(sched(), last=1030, now=1040.0).fire == (1040,)


def test_missed_slots_are_skipped_and_recorded_once() -> None:
    d = decide(sched(grace=5, missed="skip"), last=0, now=1008)
    assert d.fire == () and d.skip == 1000  # 10..1000 missed; the record moves past them


def test_missed_slots_run_once_with_catch_up() -> None:
    d = decide(sched(grace=5, missed="once"), last=0, now=1008)
    assert d.fire == (1000,) and d.skip is None


def test_catch_up_runs_before_the_on_time_slots() -> None:
    d = decide(sched(grace=15, missed="once"), last=0, now=1012)
    assert d.fire == (990, 1000, 1010)  # 990 stands for 10..990; 1000, 1010 are on time


def test_time_zones_move_daily_slots() -> None:
    utc = Schedule("d", "0 3 * * *", task="t")
    paris = Schedule("d", "0 3 * * *", task="t", tz="Europe/Paris")
    day = 1767225600  # 2026-01-01T00:00:00Z, winter: Paris is UTC+1
    assert slots_between(utc, day, day + 86400) == [day + 3 * 3600]
    assert slots_between(paris, day, day + 86400) == [day + 2 * 3600]


def test_bad_schedules_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="not a cron line"):
        Schedule("x", "every day", task="t")
    with pytest.raises(ValueError, match="missed must be one of skip, once"):
        Schedule("x", "* * * * *", task="t", missed="all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="schedule name"):
        Schedule("no spaces", "* * * * *", task="t")


@given(last=st.integers(0, 10_000), ahead=st.floats(0, 5_000), grace=st.floats(0, 300),
       missed=st.sampled_from(["skip", "once"]))
def test_decisions_fire_only_new_slots_and_move_forward(last: int, ahead: float, grace: float,
                                                        missed: Any) -> None:
    s = sched(grace=grace, missed=missed)
    now = last + ahead
    d = decide(s, last, now)
    assert list(d.fire) == sorted(set(d.fire))
    assert all(last < slot <= now and slot % 10 == 0 for slot in d.fire)
    on_time = [x for x in d.fire if now - x <= grace + 1]
    assert len(d.fire) - len(on_time) <= (missed == "once")  # at most one catch-up run
    handled = max([*d.fire, d.skip or last])
    # every due slot is handled: the next decision from the new record fires nothing now
    assert decide(s, handled, now).fire == ()
    assert d.wake_at > now


def test_two_schedulers_fire_each_slot_once_through_the_ledger() -> None:
    # Two schedulers with their own clocks, interleaved over one server: each slot of the
    # 10-second schedule is put exactly once, whichever of them gets there first.
    app = App(middleware=[])
    t = app.task(lambda p: None, name="t")
    app.schedule(EVERY_10S, t, name="s", payload=lambda slot: slot.timestamp())
    with app.testing() as session:
        server = session.server
        clocks = [1000.0, 1000.0]
        a, b = (Scheduler(app, connect=lambda: server, clock=lambda i=i: clocks[i])
                for i in range(2))
        for step in range(60):
            clocks[0] += 1.0
            clocks[1] += 1.0 if step % 3 else 2.5  # b runs ahead now and then
            (a if step % 2 else b).tick()
            (b if step % 2 else a).tick()
        slots = sorted(json.loads(j.body.split(b"\n", 1)[1]) for j in server.in_tube("t", "ready"))
        # every slot from the first after the start, each once (b's clock ran ahead: up to it)
        assert slots == [float(x) for x in range(1010, int(max(clocks)) + 1, 10)]
        assert len(server.in_tube(ledger_tube(app.schedules["s"]), "ready")) == 1
        assert last_slot(server, app.schedules["s"]) == int(slots[-1])


def test_a_lost_claim_deletes_its_marker_and_a_stale_one_loses() -> None:
    server = MemoryServer()
    s = sched()
    assert claim_slot(server, s, 1010, fired=True, now=0)
    assert not claim_slot(server, s, 1010, fired=True, now=0)  # already taken
    assert claim_slot(server, s, 1020, fired=True, now=0)
    assert not claim_slot(server, s, 1010, fired=True, now=0)  # a late scheduler: moved past
    assert [j.priority for j in server.in_tube(ledger_tube(s), "ready")] == [2**32 - 1 - 1020]


# --- real processes ---------------------------------------------------------------------------

APP = """
from stalkd.worker import App

app = App({address!r})

@app.task(tube="ticks")
def tick(payload): ...

app.schedule("* * * * * *", tick, name="every-second", payload=lambda slot: int(slot.timestamp()))
"""


def _scheduler(tmp_path: Path, address: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "stalkd.cli", "scheduler", "tickapp:app",
                             "--log-level", "WARNING"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})


def _slots(probe: Probe, n: int) -> list[int]:
    """Reserve the ``n`` ready jobs of ``ticks`` and return their slots."""
    probe.c.watch("ticks")
    out = []
    for _ in range(n):
        job = probe.c.reserve(timeout=5)
        out.append(int(bytes(job.body).split(b"\n", 1)[1]))
        probe.c.delete(job)
    return out


def test_two_scheduler_processes_fire_every_second_once_and_resume_after_a_restart(
        server: Any, tmp_path: Path) -> None:
    (tmp_path / "tickapp.py").write_text(textwrap.dedent(APP.format(address=server.address)))
    probe = Probe(server.address)
    procs = [_scheduler(tmp_path, server.address) for _ in range(2)]
    try:
        wait_for(lambda: probe.count("ticks", "ready") >= 4, timeout=30, what="4 ticks")
        for p in procs:
            p.kill()  # no clean stop: nothing local survives anyway
            p.wait()
        first = _slots(probe, probe.count("ticks", "ready"))
        down_until = time.time() + 2.5
        wait_for(lambda: time.time() > down_until, what="two slots to pass with no scheduler")
        procs = [_scheduler(tmp_path, server.address)]
        wait_for(lambda: probe.count("ticks", "ready") >= 4, timeout=30, what="4 more ticks")
        procs[0].send_signal(signal.SIGTERM)
        assert procs[0].wait(timeout=20) == 0
        second = _slots(probe, probe.count("ticks", "ready"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        probe.close()
    # Then every second from the first slot on fired exactly once, across both schedulers and
    # the restart (the slots missed while none ran were within the grace: they fired late).
    slots = first + second
    assert len(slots) == len(set(slots)), f"a slot fired twice: {sorted(slots)}"
    assert sorted(slots) == list(range(min(slots), max(slots) + 1)), sorted(slots)
    assert min(second) == max(first) + 1


@pytest.mark.parametrize("cmd", [["scheduler"], ["worker", "--schedules"]])
def test_an_app_without_schedules_is_a_usage_error(tmp_path: Path, cmd: list[str]) -> None:
    (tmp_path / "plain.py").write_text("from stalkd.worker import App\napp = App()\n"
                                       "@app.task\ndef t(p): ...\n")
    r = subprocess.run([sys.executable, "-m", "stalkd.cli", *cmd[:1], "plain:app", *cmd[1:]],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 2
    assert "has no schedules" in r.stderr and "app.schedule(cron, task)" in r.stderr


WORKER_APP = """
import os
from stalkd.worker import App

app = App({address!r})

@app.task(tube="ticks")
def tick(slot):
    fd = os.open({log!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, b"%d\\n" % slot)
    os.close(fd)

app.schedule("* * * * * *", tick, name="every-second", payload=lambda slot: int(slot.timestamp()))
"""


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_worker_with_schedules_puts_and_runs_each_slot_once(server: Any, tmp_path: Path,
                                                            mode: str) -> None:
    log = tmp_path / "ran"
    (tmp_path / "wapp.py").write_text(textwrap.dedent(
        WORKER_APP.format(address=server.address, log=str(log))))
    # two workers with schedules, so two schedulers race for every slot
    procs = [subprocess.Popen([sys.executable, "-m", "stalkd.cli", "worker", "wapp:app",
                               "--schedules", "-m", mode, "-c", "2", "--log-level", "WARNING"],
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
             for _ in range(2)]
    try:
        wait_for(lambda: log.exists() and len(log.read_text().split()) >= 4, timeout=30,
                 what="4 slots run")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=40) for p in procs]
    assert codes == [0, 0]
    ran = [int(x) for x in log.read_text().split()]
    assert len(ran) == len(set(ran)), f"a slot ran twice: {ran}"


def test_a_payload_function_that_raises_loses_its_slot_not_the_schedule() -> None:
    app = App(middleware=[])
    t = app.task(lambda p: None, name="t")

    def payload(slot: Any) -> int:
        if int(slot.timestamp()) == 1020:
            raise RuntimeError("bad slot")
        return int(slot.timestamp())

    app.schedule(EVERY_10S, t, name="s", payload=payload)
    with app.testing() as session:
        now = [1000.0]
        s = Scheduler(app, connect=lambda: session.server, clock=lambda: now[0])
        for _ in range(4):
            now[0] += 10
            s.tick()
        bodies = [j.body.split(b"\n", 1)[1] for j in session.server.in_tube("t", "ready")]
    assert bodies == [b"1010", b"1030", b"1040"]
