"""The measurements of one system against one fresh server, in a child process of
bench/worker_bench.py (``--system NAME``): prints one JSON object.

- put: ``BENCH_PUTS`` jobs put one at a time from this process (jobs/s);
- bulk: ``BENCH_JOBS`` jobs through the library's bulk API, or a loop of puts where it has none;
- drain: for each worker configuration (8 job slots), the jobs/s from the moment a tenth of the
  queue is done (so worker start-up is not counted) until none is left, and the CPU time of the
  workers' process trees and the server over that same stretch, per job;
- latency: first, on the fresh server, with the first configuration's workers started and idle,
  ``BENCH_LAT_N`` stamp jobs sent at ``BENCH_LAT_RATE`` per second; each records when it started
  (time.time(), one clock for all processes), and p50/p99 of started - sent are reported.
  (Measured after the drains instead, it would also time each server's housekeeping of the
  drains: Redis's RDB save after 10,000 changes, stalkd's compaction of its WAL.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from systems import ADAPTERS, HERE, Adapter

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of ``pid`` from /proc, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds used so far by ``roots`` and all their living descendants."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                stats[int(entry)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo, seen = 0.0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


def start_workers(commands: list[list[str]], env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(cmd, cwd=HERE, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
            for cmd in commands]


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each worker's own process group (made for it by ``start_new_session``), then
    SIGKILL what is left after 20 s."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def drain(a: Adapter, procs: list[subprocess.Popen[bytes]], server_pid: int) -> dict[str, float]:
    total = a.remaining()
    mark = total - max(1, total // 10)
    roots = [server_pid] + [p.pid for p in procs]
    deadline = time.monotonic() + 600
    while (left := a.remaining()) > mark:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError(f"{a.name}: workers stalled or exited ({left} of {total} left)")
        time.sleep(0.002)
    t0, cpu0, start_left = time.perf_counter(), tree_cpu(roots), left
    while a.remaining() > 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{a.name}: drain did not finish")
        time.sleep(0.002)
    elapsed, cpu = time.perf_counter() - t0, tree_cpu(roots) - cpu0
    return {"jobs_s": start_left / elapsed, "cpu_ms_per_1000": cpu / start_left * 1e6,
            "jobs": start_left}


def _stamps(directory: str) -> list[tuple[float, float]]:
    rows = []
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as f:
            for line in f:
                if line.endswith("\n"):
                    sent, started = line.split()
                    rows.append((float(sent), float(started)))
    return rows


def _wait_stamps(directory: str, n: int, timeout: float = 60.0) -> list[tuple[float, float]]:
    deadline = time.monotonic() + timeout
    while len(rows := _stamps(directory)) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(rows)} of {n} stamp jobs ran")
        time.sleep(0.01)
    return rows


def latency(a: Adapter, stamps: str, n: int, rate: float) -> dict[str, float]:
    warm = 20  # every worker thread's first jobs, paced like the measured ones
    for _ in range(warm):
        a.stamp(time.time())
        time.sleep(1 / rate)
    _wait_stamps(stamps, warm)
    for name in os.listdir(stamps):
        os.unlink(os.path.join(stamps, name))
    t0 = time.monotonic()
    for i in range(n):
        pause = t0 + i / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        a.stamp(time.time())
    waits = sorted(started - sent for sent, started in _wait_stamps(stamps, n))
    return {"p50_ms": waits[len(waits) // 2] * 1000,
            "p99_ms": waits[min(len(waits) - 1, int(len(waits) * 0.99))] * 1000}


def main(system: str) -> dict[str, Any]:
    a = ADAPTERS[system]()
    n, n_put = int(os.environ["BENCH_JOBS"]), int(os.environ["BENCH_PUTS"])
    server_pid = int(os.environ["BENCH_SERVER_PID"])
    out: dict[str, Any] = {"system": system, "bulk_api": a.bulk, "configs": {}}
    with tempfile.TemporaryDirectory(prefix="bench-stamps-") as stamps:
        env = dict(os.environ, BENCH_STAMPS=stamps, PYTHONPATH=os.pathsep.join(
            [HERE, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        os.environ["BENCH_STAMPS"] = stamps
        procs = start_workers(a.configs[0][1], env)
        try:
            out["latency"] = latency(a, stamps, int(os.environ["BENCH_LAT_N"]),
                                     float(os.environ["BENCH_LAT_RATE"]))
        finally:
            stop_workers(procs)
        t0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(n_put):  # drained by the first configuration with the rest
            a.put()
        out["put_s"] = n_put / (time.perf_counter() - t0)
        # the producer's own CPU per put: what load on the machine disturbs least
        out["put_cpu_us"] = (time.process_time() - cpu0) / n_put * 1e6
        for label, commands in a.configs:
            t0 = time.perf_counter()
            a.fill(n)
            out["bulk_s"] = max(out.get("bulk_s", 0.0), n / (time.perf_counter() - t0))
            procs = start_workers(commands, env)
            try:
                out["configs"][label] = drain(a, procs, server_pid)
            finally:
                stop_workers(procs)
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
