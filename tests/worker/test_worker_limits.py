"""Limits shared by every worker: several real worker processes never exceed "N at once" (per
key too) nor "N per period", counted from a log the handlers append to, not from timing; a
holder killed with SIGKILL gives its token back; the tokens survive a server restart."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from worker_probe import Probe, queue_server, start_server, stop_processes, wait_for

from stalkd.worker import App
from stalkd.worker.limits import Limit, LimitTimeout, parse_rate

_FIXTURES = (queue_server,)

APP = """
import os, time
from stalkd.worker import App
from stalkd.worker.limits import Limit

app = App({address!r})
LOG = {log!r}
two = Limit(app, "two", concurrency=2)
one_per_key = Limit(app, "one-per-key", concurrency=1)
rate = Limit(app, "rate", rate="3/2s")

def note(line):
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, line.encode() + b"\\n")  # one write: lines never interleave
    os.close(fd)

@app.task(tube="lim")
def both(p):
    with two.hold():
        note("+two")
        time.sleep(0.02)   # stands for work: overlaps would show, not prove anything
        note("-two")

@app.task(tube="lim")
def keyed(p):
    with one_per_key.hold(key=p):
        note("+" + p)
        time.sleep(0.02)
        note("-" + p)

@app.task(tube="alim")
async def abounded(p):
    import asyncio
    async with two.ahold():
        note("+two")
        await asyncio.sleep(0.02)
        note("-two")

@app.task(tube="lim")
def paced(p):
    with rate.hold():
        note("@%f" % time.time())
"""


def _workers(tmp_path: Path, n: int, *extra: str) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-m", "stalkd.cli", "worker", "limapp:app", "-c",
                              "3", "--log-level", "WARNING", *extra], cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": str(tmp_path)})
            for _ in range(n)]


def _lines(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def _most_at_once(lines: list[str], name: str) -> int:
    now = most = 0
    for line in lines:
        if line[1:] == name:
            now += 1 if line[0] == "+" else -1
            most = max(most, now)
    return most


def test_limits_hold_across_worker_processes(server: Any, tmp_path: Path) -> None:
    log = tmp_path / "log"
    (tmp_path / "limapp.py").write_text(textwrap.dedent(APP.format(address=server.address,
                                                                   log=str(log))))
    sys.path.insert(0, str(tmp_path))
    try:
        import limapp  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    for i in range(18):
        limapp.both.put(i)
        limapp.keyed.put("a" if i % 2 else "b")
    for i in range(9):
        limapp.paced.put(i)
        limapp.abounded.put(i)
    # 9 thread slots and 6 asyncio slots contend for each limit ("two" is used by both)
    procs = [*_workers(tmp_path, 3, "-t", "lim"), *_workers(tmp_path, 2, "-m", "asyncio",
                                                            "-t", "alim")]
    try:
        wait_for(lambda: sum(x.startswith("-") for x in _lines(log)) == 45
                 and sum(x.startswith("@") for x in _lines(log)) == 9,
                 timeout=60, what="every job to run")
    finally:
        stop_processes(procs)
        sys.modules.pop("limapp", None)
    lines = _lines(log)
    assert _most_at_once(lines, "two") <= 2
    assert _most_at_once(lines, "a") <= 1 and _most_at_once(lines, "b") <= 1
    # 3 per 2 s: any 1.5 s holds at most 3 starts (the 0.5 s allows for the time between a
    # token's release, which starts its period, and the handler noting its start)
    starts = sorted(float(x[1:]) for x in lines if x.startswith("@"))
    assert max(sum(1 for t in starts if s <= t < s + 1.5) for s in starts) <= 3, starts


HOLDER = """
import sys
from stalkd.worker import App
from stalkd.worker.limits import Limit
app = App(sys.argv[1])
with Limit(app, "solo", concurrency=1).hold():
    print("holding", flush=True)
    sys.stdin.read()   # until killed
"""


def test_a_killed_holder_gives_its_token_back(server: Any) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, server.address],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"holding\n"
        solo = Limit(App(server.address), "solo", concurrency=1)
        with pytest.raises(LimitTimeout), solo.hold(timeout=1):
            pass  # the one token is held elsewhere
        holder.kill()
        holder.wait()
        with solo.hold(timeout=30):
            pass  # given back when the holder's connection closed, not after a lease
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_tokens_survive_a_server_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server("stalkd", "-b", str(data))
    try:
        lim = Limit(App(server.address), "kept", concurrency=2)
        with lim.hold():
            pass
        lim.close()
    finally:
        server.stop()
    server = start_server("stalkd", "-b", str(data))
    probe = Probe(server.address)
    try:
        assert probe.count("stalkd.limit.kept", "ready") == 2
        assert probe.count("stalkd.limit.kept.init", "ready") == 1
        # a process that never saw the limit uses the same two tokens: makes no more
        lim = Limit(App(server.address), "kept", concurrency=2)
        with lim.hold(), lim.hold():
            assert probe.count("stalkd.limit.kept", "reserved") == 2
        assert probe.count("stalkd.limit.kept", "ready") == 2
    finally:
        probe.close()
        server.stop()


def test_a_rate_token_comes_back_after_its_period(server: Any) -> None:
    probe = Probe(server.address)
    try:
        lim = Limit(App(server.address), "r", rate="1/hour")
        with lim.hold():
            pass
        assert probe.count("stalkd.limit.r", "delayed") == 1  # back in an hour
        with pytest.raises(LimitTimeout), lim.hold(timeout=1):
            pass
    finally:
        probe.close()


def test_bad_limits_are_refused_by_name() -> None:
    app = App()
    with pytest.raises(ValueError, match="one of them"):
        Limit(app, "x")
    with pytest.raises(ValueError, match="expected N/UNIT"):
        parse_rate("100 per fortnight")
    assert parse_rate("1/d") == (1, 86400.0)


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_a_job_whose_rate_token_is_not_due_is_put_back_for_then_not_held(server: Any,
                                                                         mode: str) -> None:
    from worker_probe import running

    from stalkd.worker.middleware import Retries

    # Given a rate limit of one per hour, and two jobs that need it
    app = App(server.address, middleware=[Retries()])
    hourly = Limit(app, "hourly-" + mode, rate="1/hour")
    ran: list[int] = []

    if mode == "asyncio":
        @app.task(tube="hourly")
        async def paced(p: int) -> None:
            async with hourly.ahold():
                ran.append(p)
    else:
        @app.task(tube="hourly")
        def paced(p: int) -> None:
            with hourly.hold():
                ran.append(p)

    probe = Probe(server.address)
    try:
        first = paced.put(1)
        second = paced.put(2)
        assert first is not None and second is not None
        def postponed() -> list[dict[str, Any]]:
            found = (probe.job(i) for i in range(second + 1, second + 40))
            return [j for j in found if j and j["tube"] == "hourly"]

        with running(app, mode, concurrency=2):
            # Then one runs, and the other is put again for when the token is due (in about
            # an hour; a first postponement may be short, while the token was held for an
            # instant): no worker slot holds it meanwhile, and no attempt was used
            wait_for(lambda: [j["state"] for j in postponed()] == ["delayed"]
                     and int(postponed()[0]["time-left"]) > 3000,
                     timeout=30, what="the second job to be postponed by an hour")
        assert len(ran) == 1
        assert probe.job(first) is None and probe.job(second) is None  # both acknowledged
        (left,) = postponed()
        assert left["releases"] == 0 and left["buries"] == 0
    finally:
        probe.close()
        hourly.close()
