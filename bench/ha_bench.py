"""Automatic failover (``stalkd serve --ha``), same machine, same run.

1. The lease's cost: durable puts (100-byte bodies, 16 connections, depth 1 and 64) on a node
   alone vs the same node under ``--ha`` (its lease keeper renewing, every release checking the
   lease), alternating rounds, medians and the ratio.
2. Failover time: two ``--ha`` nodes (asynchronous, the default lease TTL unless
   ``BENCH_HA_TTL``), ``kill -9`` of the primary, then the time until the other node answers a
   put with INSERTED; the killed node is started again and rejoins before the next cycle.
   ``BENCH_HA_CYCLES`` cycles (default 20): median, p99 and max.

Run: ``.venv/bin/python bench/standby_bench.py --ha`` (or this file). One etcd from Debian, on a
UNIX socket in a temporary directory; servers listen on port 0.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import server_bench as sb  # noqa: E402

import stalkd  # noqa: E402
from etcdserver import start_etcd  # noqa: E402  (tests/etcdserver.py)
from stalkd.client import errors  # noqa: E402
from support import wait_for_listener  # noqa: E402

CYCLES = int(os.environ.get("BENCH_HA_CYCLES", "20"))
TTL = os.environ.get("BENCH_HA_TTL", "5")
CONNS = 16


def start(d: str, *flags: str) -> sb.Server:
    args = [*sb.STALKD, "-l", "127.0.0.1", "-p", "0", "--log-level", "warning", "--dir", d, *flags]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return sb.Server("stalkd", proc, wait_for_listener(proc, 60, "stalkd"), None, "always")


def role(srv: sb.Server) -> str:
    try:
        with stalkd.Client(f"127.0.0.1:{srv.port}", timeout=2) as c:
            return str(c.stats()["role"])
    except (OSError, errors.ClientConnectionError, errors.BeanstalkError):
        return "down"


def until(cond: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def first_insert(port: int, t0: float) -> float:
    """Seconds from ``t0`` until a put on ``port`` is answered INSERTED (retrying refusals)."""
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                while True:
                    s.sendall(b"put 0 0 60 1\r\nx\r\n")
                    reply = s.recv(100)
                    if reply.startswith(b"INSERTED"):
                        return time.monotonic() - t0
                    if not reply:
                        break
                    time.sleep(0.01)
        except OSError:
            time.sleep(0.01)


def lease_cost(cluster: str, root: str) -> None:
    alone = start(tempfile.mkdtemp(dir=root))
    ha = start(tempfile.mkdtemp(dir=root), "--ha", cluster, "--name", "solo")
    try:
        until(lambda: role(ha) == "primary", "the --ha node to lead")
        print(f"{'work':4} {'depth':>5} | {'alone/s':>9} | {'--ha/s':>9} {'ratio':>6} | CPU % alone, --ha")
        for depth in (1, 64):
            runs: dict[str, list[tuple[float, float, float]]] = {"alone": [], "ha": []}
            for r in range(sb.ROUNDS):
                for name, srv in ((("alone", alone), ("ha", ha)) if r % 2 == 0 else (("ha", ha), ("alone", alone))):
                    runs[name].append(sb.run_cell(srv, "put", 100, CONNS, depth))
            a, h = sb._median(runs["alone"]), sb._median(runs["ha"])
            print(f"put  {depth:5} | {a[0]:9.0f} | {h[0]:9.0f} {h[0] / a[0]:5.2f}x | {a[1]:.0f}, {h[1]:.0f}",
                  flush=True)
    finally:
        ha.stop()
        alone.stop()


def failover_times(cluster: str, root: str) -> list[float]:
    dirs = {n: tempfile.mkdtemp(dir=root, prefix=f"{n}-") for n in ("a", "b")}

    def node(n: str) -> sb.Server:
        return start(dirs[n], "--ha", cluster, "--name", n, "--ha-ttl", TTL)

    nodes = {"a": node("a")}
    until(lambda: role(nodes["a"]) == "primary", "a to lead")
    nodes["b"] = node("b")
    times = []
    try:
        for cycle in range(CYCLES):
            until(lambda: {role(s) for s in nodes.values()} == {"primary", "standby"}, "a primary and a standby")
            prim = next(n for n, s in nodes.items() if role(s) == "primary")
            other = "b" if prim == "a" else "a"
            nodes[prim].proc.kill()
            t0 = time.monotonic()
            nodes[prim].proc.wait()
            times.append(first_insert(nodes[other].port, t0))
            print(f"# cycle {cycle + 1}: kill -9 -> first INSERTED {times[-1]:.2f} s", flush=True)
            nodes[prim] = node(prim)
    finally:
        for s in nodes.values():
            s.stop()
    return times


def main() -> int:
    print(f"# ha_bench: lease TTL {TTL} s, {CYCLES} failover cycles, {sb.SECONDS:.1f} s per cell, "
          f"{sb.ROUNDS} rounds, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    root = tempfile.mkdtemp(prefix="ha-bench-", dir="/var/tmp")
    etcd = start_etcd(Path(root) / "etcd")
    try:
        lease_cost(etcd.cluster("cost"), root)
        times = sorted(failover_times(etcd.cluster("failover"), root))
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        print(f"# kill -9 -> first INSERTED on the new primary: median {statistics.median(times):.2f} s, "
              f"p99 {p99:.2f} s, max {times[-1]:.2f} s over {len(times)} cycles (TTL {TTL} s)")
    finally:
        etcd.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
