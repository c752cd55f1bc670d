"""``stalkd workers`` under two real worker processes: each is listed with its slots and the job
it runs now; one killed with SIGKILL is gone from the list at once (its connection closed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from worker_probe import queue_server, stop_processes, wait_for

from stalkd.worker.presence import Presence

_FIXTURES = (queue_server,)

APP = """
import os, time
from stalkd.worker import App
from stalkd.worker.presence import Presence
from stalkd.worker.middleware import default_middleware

app = App({address!r}, middleware=[*(m for m in default_middleware() if not isinstance(m, Presence)),
                                   Presence(interval=0.2)])

@app.task(tube="slow")
def slow(p):
    open(os.path.join({flags!r}, "%d.%d" % (os.getpid(), p)), "w").close()
    while not os.path.exists(os.path.join({flags!r}, "go")):
        time.sleep(0.02)
"""


def _workers_now(address: str) -> list[dict[str, Any]]:
    got = subprocess.run([sys.executable, "-m", "stalkd.cli", "workers", "-a", address, "--json"],
                         capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if not k.startswith("STALKD_")})
    assert got.returncode == 0, got.stderr
    found: list[dict[str, Any]] = json.loads(got.stdout)
    return found


def test_two_workers_are_listed_with_their_jobs_and_a_killed_one_is_gone(server: Any,
                                                                         tmp_path: Path) -> None:
    flags = tmp_path / "flags"
    flags.mkdir()
    (tmp_path / "presapp.py").write_text(textwrap.dedent(APP.format(address=server.address,
                                                                    flags=str(flags))))
    sys.path.insert(0, str(tmp_path))
    try:
        import presapp  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-m", "stalkd.cli", "worker", "presapp:app", "-c", "2",
                               "--log-level", "WARNING"], cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(tmp_path)})
             for _ in range(2)]
    try:
        # Given two worker processes of 2 slots, all four busy
        ids = [presapp.slow.put(i) for i in range(4)]
        wait_for(lambda: len(list(flags.iterdir())) == 4, timeout=60, what="the four jobs to start")
        pids = {p.pid for p in procs}
        assert {int(f.name.split(".")[0]) for f in flags.iterdir()} == pids
        # Then both are listed, with their slots and the jobs each runs
        listed = wait_for(lambda: (w := _workers_now(server.address)) and len(w) == 2
                          and all(len(x["jobs"]) == 2 for x in w) and w, timeout=30,
                          what="two workers with two jobs each")
        assert {w["pid"] for w in listed} == pids
        assert all(w["slots"] == 2 and w["tubes"] == ["slow"] for w in listed)
        assert sorted(j["id"] for w in listed for j in w["jobs"]) == sorted(ids)
        assert all(j["task"] == "slow" and j["running_s"] >= 0 for w in listed for j in w["jobs"])
        # When one is killed
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=30)
        # Then only the other is listed (the dead one's records swept on the way)
        wait_for(lambda: [w["pid"] for w in _workers_now(server.address)] == [procs[1].pid],
                 timeout=30, what="the killed worker to be gone")
        assert [w["pid"] for w in _workers_now(server.address)] == [procs[1].pid]
    finally:
        (flags / "go").touch()
        stop_processes(procs)
        sys.modules.pop("presapp", None)
    # and a worker that stopped cleanly is gone too
    wait_for(lambda: _workers_now(server.address) == [], timeout=30, what="no worker listed")


def test_a_record_names_the_running_jobs() -> None:
    p = Presence()
    p._info = {"host": "h", "pid": 1}
    rec = json.loads(p.record(now=5.0))
    assert rec == {"host": "h", "pid": 1, "at": 5.0, "jobs": []}
