"""docs/cluster.md's three-node script, run as written: in a network namespace of the test's own
(its fixed ports, 2379 and 11300-11302, cannot clash with anything there), then the failover
and the switchover the page shows."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import require_binary

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "etcd://127.0.0.1:2379/stalkd/demo"


@pytest.fixture
def netns() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a network namespace needs root and iproute2")
    name = f"stalkd-doc-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def run(ns: str, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          timeout=timeout, env=env)


def status(ns: str) -> str:
    out = run(ns, "stalkd", "cluster", "status", CLUSTER)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_three_node_example_fails_over_and_switches_over(netns: str, tmp_path: Path) -> None:
    require_binary("etcd")
    d = tmp_path / "cluster"
    pids: list[int] = []
    try:
        started = run(netns, "bash", str(ROOT / "examples/cluster/three-nodes.sh"), str(d))
        pids = [int(p.read_text()) for p in sorted(d.glob("*.pid"))]
        assert started.returncode == 0, started.stderr
        first = started.stdout
        print(first)
        leader = re.search(r"^leader: (node\d)", first, re.M)
        assert leader is not None
        roles = {ln.split()[0]: ln.split()[1] for ln in first.splitlines()[3:]}
        assert sorted(roles.values()) == ["primary", "standby", "standby"]
        old = leader[1]
        # kill -9 of the primary: another node leads by itself, with the third following it
        os.kill(int((d / f"{old}.pid").read_text()), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not re.search(rf"^leader: (?!{old})node\d", status(netns), re.M):
            assert time.monotonic() < deadline, status(netns)
            time.sleep(0.2)
        after = status(netns)
        print(after)
        assert re.search(rf"^{old}\s+down", after, re.M)
        deadline = time.monotonic() + 60
        while "standby" not in status(netns):  # the third node follows the new primary
            assert time.monotonic() < deadline, status(netns)
            time.sleep(0.2)
        # ... and accepts writes without the dead node (the sync set names the third one)
        put = run(netns, "stalkd", "put", "-a", "127.0.0.1:11300,127.0.0.1:11301,127.0.0.1:11302",
                  "after the failover")
        assert put.returncode == 0, put.stderr
        # the dead node, started again, rejoins; then a planned switchover to the third
        new = re.search(r"^leader: (node\d)", after, re.M)
        assert new is not None
        target = next(n for n in ("node0", "node1", "node2") if n not in (old, new[1]))
        i = int(old[-1])
        env_path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
        with open(d / f"{old}.log", "ab") as log:
            restarted = subprocess.Popen(
                ["ip", "netns", "exec", netns, "stalkd", "serve", "--dir", str(d / old), "-p", str(11300 + i),
                 "--ha", CLUSTER, "--name", old, "--sync-standbys", "1",
                 "--replication-secret", str(d / "replication.secret")],
                stdout=log, stderr=log, env={**os.environ, "PATH": env_path})
        pids.append(restarted.pid)
        switched = run(netns, "stalkd", "cluster", "switchover", CLUSTER, "--to", target)
        print(switched.stdout)
        assert switched.returncode == 0, switched.stderr
        assert f"switched over: {target} is the primary" in switched.stdout
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
