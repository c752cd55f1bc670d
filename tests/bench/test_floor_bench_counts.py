"""bench/floor_bench.py --counts on a tiny size: every meter gives per-job figures that match
what a depth-1 lockstep load must cost, so a broken difference (a meter not reset between runs,
strace missing a thread, a dump read too early) shows here rather than in a report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stalkd.extensions import compiled_modules
from stalkd.server import fastconn
from support import require_binary


def _engine_compiled() -> bool:
    """Whether the engine's modules run compiled by Cython here (no Python frame per command)."""
    return all(ok for name, ok in compiled_modules().items() if name.startswith("stalkd.engine."))


BENCH = Path(__file__).resolve().parents[2] / "bench"
READS = ("read", "recvfrom", "recvmsg", "readv")
WRITES = ("write", "writev", "sendto", "sendmsg")


def _counts(tmp_path: Path, small: int, large: int, *args: str) -> tuple[str, dict[str, dict[str, dict[str, dict[str, float]]]]]:
    out = tmp_path / "counts.json"
    done = subprocess.run([sys.executable, str(BENCH / "floor_bench.py"), "--counts", "--jobs", str(small), str(large),
                           "--json", str(out), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(out.read_text())["per_job"]


def _check_syscalls(per_job: dict[str, dict[str, dict[str, float]]]) -> None:
    for cell, servers in per_job.items():
        for kind, calls in servers.items():
            # each job's request is read and its reply written, at least once, by every server
            assert sum(calls.get(n, 0) for n in READS) >= 0.9, (cell, kind, calls)
            assert sum(calls.get(n, 0) for n in WRITES) >= 0.9, (cell, kind, calls)
            assert sum(calls.values()) < 50, (cell, kind, calls)


def test_syscalls_and_python_calls_per_job(tmp_path: Path) -> None:
    require_binary("strace")
    require_binary("beanstalkd")
    # 200 extra jobs: what a run does once (a wake-up, a timer) stays below 0.05 per job
    stdout, per_job = _counts(tmp_path, 50, 250, "--meter", "strace", "--meter", "pycalls", "--functions",
                              "--server", "stalkd", "--server", "floor", "--server", "beanstalkd",
                              "--cell", "memory:put:1", "--cell", "always:put:1", "--cell", "memory:rd:1")
    assert set(per_job["strace"]["memory:put:1"]) == {"stalkd", "floor", "beanstalkd"}
    assert set(per_job["strace"]["memory:rd:1"]) == {"stalkd", "floor", "beanstalkd"}
    _check_syscalls(per_job["strace"])
    for kind in ("stalkd", "floor", "beanstalkd"):  # durable: each acknowledged put is synced
        calls = per_job["strace"]["always:put:1"][kind]
        assert calls.get("fdatasync", 0) + calls.get("fsync", 0) >= 0.9, (kind, calls)
    assert "beanstalkd" not in per_job["pycalls"]["memory:put:1"]
    # the floor's one Python call per put is its data_received: the difference method is exact
    floor = per_job["pycalls"]["memory:put:1"]["floor"]
    assert floor["calls"] == pytest.approx(1.0, abs=0.05)
    assert floor["py floor_server.py:Floor.data_received"] == pytest.approx(1.0, abs=0.05)
    # reserve+delete: two commands per job, each in a data_received of its own (lockstep)
    rd = per_job["pycalls"]["memory:rd:1"]["floor"]
    assert rd["py floor_server.py:Floor.data_received"] == pytest.approx(2.0, abs=0.05)
    durable = per_job["pycalls"]["always:put:1"]["floor"]
    assert durable["py floor_server.py:FloorSync.store"] == pytest.approx(1.0, abs=0.05)
    assert durable["c posix.fdatasync"] == pytest.approx(1.0, abs=0.05)
    pycalls = per_job["pycalls"]
    # Compiled, the connection, the server's common case and the engine run a memory put and a
    # reserve+delete without one Python frame; the reference runs several per command. With the
    # WAL's write chain compiled too (its write, fsync and room), so does a durable put.
    compiled = fastconn.IMPLEMENTATION == "cython" and _engine_compiled()
    wal_compiled = compiled and compiled_modules()["stalkd.persist.wal"]
    if not wal_compiled:
        assert pycalls["always:put:1"]["stalkd"]["calls"] > 1  # the durable path runs Python per put
    for cell in ("memory:put:1", "memory:rd:1") + (("always:put:1",) if wal_compiled else ()):
        per_fn = pycalls[cell]["stalkd"]
        calls = per_fn["calls"]
        if compiled:
            # Calls that do not scale with jobs (timers, the loop's own wake-ups) differ between
            # the two runs by wall time, up to about 0.3 per job on a busy machine: so no
            # function may run once per job, and the total stays far below the reference's 10+.
            per_job_fns = {k: v for k, v in per_fn.items() if k != "calls" and v >= 0.9}
            assert not per_job_fns and abs(calls) < 1.5, (cell, calls, per_job_fns)
        else:
            assert calls > 5, (cell, calls)
    assert "## system calls per job (strace" in stdout
    assert "## Python function calls per job" in stdout
    assert "## user-space instructions" not in stdout
    assert "py floor_server.py:Floor.data_received 1.0" in stdout  # --functions lists them


def test_instructions_per_job_under_callgrind(tmp_path: Path) -> None:
    require_binary("valgrind")
    require_binary("beanstalkd")
    # beanstalkd starts at once under valgrind (a Python server takes tens of seconds there);
    # the meter is the same for every server
    stdout, per_job = _counts(tmp_path, 10, 30, "--meter", "callgrind", "--server", "beanstalkd",
                              "--cell", "memory:put:1", "--cell", "memory:rd:1")
    put = per_job["callgrind"]["memory:put:1"]["beanstalkd"]["instructions"]
    rd = per_job["callgrind"]["memory:rd:1"]["beanstalkd"]["instructions"]
    assert put > 500, put  # a put is never free: the difference held
    assert rd > put, (rd, put)  # two commands per job against one
    row = next(line for line in stdout.splitlines() if line.startswith("memory:put:1"))
    assert f"{put:,.0f}" in row


def test_the_wake_cell_and_a_peer_tree(tmp_path: Path) -> None:
    # The peer column is this very tree here: what is checked is that it runs and is counted.
    src = Path(__file__).resolve().parents[2] / "src"
    stdout, per_job = _counts(tmp_path, 20, 80, "--meter", "pycalls", "--functions", "--cell", "memory:wake:1",
                              "--server", "stalkd", "--server", "floor", "--server", "peer", "--peer-src", str(src))
    wake = per_job["pycalls"]["memory:wake:1"]
    assert set(wake) == {"stalkd", "peer"}  # the floor never blocks in reserve: no wake cell
    assert "st/peer" in stdout and f"peer: stalkd from {src}" in stdout
    if _engine_compiled():
        # the waiting reserve, the put that hands it the job and the delete: no engine frame
        for kind in ("stalkd", "peer"):
            engine = {k: v for k, v in wake[kind].items() if k.startswith("py stalkd/engine/") and v >= 0.9}
            assert not engine, (kind, engine)


def test_a_peer_column_needs_its_tree(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH / "floor_bench.py"), "--counts", "--server", "peer",
                           "--meter", "pycalls"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--peer-src" in done.stderr
