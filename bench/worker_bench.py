"""Worker end to end against the peers: stalkd's worker and producer next to Dramatiq, Celery,
huey and RQ (each on Redis), all measured in one run, systems alternating.

Each system gets the same no-op task and 8 job slots (its worker configurations are listed in
``bench/peers/systems.py``; the best is reported), a fresh server of its own on a UNIX socket in
a temporary directory (stalkd's server, or Debian's redis-server), started and stopped by PID,
and is measured in a child process (``bench/peers/measure.py``): single put, bulk put, drain
jobs/s with the CPU per job of workers and server, and put->start latency p50/p99 at a light
steady rate. Two tiers: stalkd in memory against Redis at its defaults, and stalkd ``--dir``
(fsync before every reply) against Redis with ``appendonly yes, appendfsync always``. It prints
stalkd's ratio to the best peer in every cell and the issue's targets. The peers are the
``bench`` extra: ``pip install -e '.[bench]'``.

Run: .venv/bin/python bench/worker_bench.py [--quick] [--rounds R]   (N: WORKER_BENCH_JOBS)

``--peer-src DIR`` instead compares this tree's producer and worker with the stalkd in another
``src/`` directory (e.g. a ``git worktree`` of an older commit), on one stalkd server (in memory),
cases alternating between the two trees, each in a fresh process: ``task.put`` one at a time,
bulk put (``task.put_many``, or ``Client.put_many`` of encoded bodies where the peer has none),
and drain with ``threads x4`` (wall clock, and jobs per CPU second of the worker's process, which
load on the machine disturbs less). Ratios are this tree over the peer, best of ``--rounds``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

PAYLOAD = "x" * 100


def noop(payload: str) -> None:
    """The task both frameworks run."""
    return None


# --- stalkd worker ----------------------------------------------------------------------------

def stalkd_case(address: str, mode: str, concurrency: int, n: int) -> float:
    from stalkd.client import Client
    from stalkd.worker import App, make_worker

    tube = f"bench-{mode}-{concurrency}-{time.monotonic_ns()}"
    app = App(address)
    task = app.task(noop, name="noop", tube=tube)
    body = task.encode(PAYLOAD)
    assert len(body) < 160
    with Client(address) as c:
        c.use(tube)
        c.put_many([body] * n)
        worker = make_worker(app, mode=mode, concurrency=concurrency)
        t = threading.Thread(target=worker.run, daemon=True)
        t0 = time.perf_counter()
        t.start()
        while True:
            s = c.stats_tube(tube)
            if int(s["current-jobs-ready"]) == 0 and int(s["current-jobs-reserved"]) == 0:
                break
            time.sleep(0.005)
        elapsed = time.perf_counter() - t0
        worker.stop()
        t.join(timeout=30)
    return n / elapsed


# --- this tree against another (--peer-src) ---------------------------------------------------

def _case_in_process(kind: str, address: str, n: int) -> float:
    """One case in this process (run by the child of ``ab``): a rate in jobs/s."""
    from stalkd.client import Client
    from stalkd.worker import App

    tube = f"ab-{kind}-{time.monotonic_ns()}"
    app = App(address, middleware=[])
    task = app.task(noop, name="noop", tube=tube, ttr=600)
    if kind == "drain":
        return stalkd_case(address, "threads", 4, n)
    if kind == "drain-cpu":  # jobs per CPU second of this process (worker and pre-fill client)
        cpu = time.process_time()
        stalkd_case(address, "threads", 4, n)
        return n / (time.process_time() - cpu)
    t0 = time.perf_counter()
    if kind == "put":
        for _ in range(n):
            task.put(PAYLOAD)
    elif hasattr(task, "put_many"):
        task.put_many([PAYLOAD] * n)
    else:
        with Client(address) as c:
            c.use(tube)
            c.put_many([task.encode(PAYLOAD) for _ in range(n)], ttr=600)
    rate = n / (time.perf_counter() - t0)
    with Client(address) as c:
        assert int(c.stats_tube(tube)["current-jobs-ready"]) == n
    return rate


def ab(peer_src: str, n: int, rounds: int) -> int:
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    trees = {"this": os.path.abspath(here), "peer": os.path.abspath(peer_src)}
    best: dict[tuple[str, str], float] = {}
    # a UNIX socket in a directory of our own: no port to pick, nothing else can take it
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as workdir, \
            unix_server("stalkd", "memory", workdir) as (server_env, _pid):
        address = server_env["BENCH_STALKD"]
        for _ in range(rounds):
            for kind in ("put", "put_many", "drain", "drain-cpu"):
                for tree, src in trees.items():
                    env = dict(os.environ, PYTHONPATH=src)
                    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--case",
                                          kind, address, str(n)], env=env, check=True,
                                         capture_output=True, text=True).stdout
                    rate = float(out.strip().splitlines()[-1])
                    best[kind, tree] = max(best.get((kind, tree), 0.0), rate)
    print(f"producer and worker, this tree vs {trees['peer']}: {n} jobs per case, best of "
          f"{rounds}, one stalkd server (memory, at {address}); {os.cpu_count()} CPUs")
    print(f"{'case':<28} {'this jobs/s':>12} {'peer jobs/s':>12}  ratio")
    labels = {"put": "task.put (one at a time)", "put_many": "bulk put", "drain": "drain threads x4",
              "drain-cpu": "drain, jobs per CPU s"}
    for kind, label in labels.items():
        a, b = best[kind, "this"], best[kind, "peer"]
        print(f"{label:<28} {a:>12.0f} {b:>12.0f}  {a / b:5.2f}x")
    return 0


# --- the peers: Dramatiq, Celery, huey and RQ on Redis ----------------------------------------

SYSTEMS = ("stalkd", "dramatiq", "celery", "huey", "rq")
# Celery and RQ drain 10-50x slower than the others: they get a quarter of the jobs (rates are
# per job, measured over the same share of the queue), so one run stays within minutes.
SLOW = {"celery": 4, "rq": 4}
TIERS = {  # tier: (stalkd serve arguments, redis-server arguments), both beside the defaults
    "memory": ([], []),
    "durable": (["--dir", "DATA"], ["--appendonly", "yes", "--appendfsync", "always"]),
}


def _wait_socket(path: str, proc: subprocess.Popen[bytes], ping: bytes, answer: bytes) -> None:
    deadline = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}) before listening on {path}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(1)
                s.connect(path)
                s.sendall(ping)
                if s.recv(64).startswith(answer):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing answers on {path}")
        time.sleep(0.01)


@contextmanager
def unix_server(system: str, tier: str, workdir: str) -> Iterator[tuple[dict[str, str], int]]:
    """A fresh server for one system in one tier, on a UNIX socket in ``workdir`` (no port to
    choose); yields the environment naming it and its PID, and stops it by that PID."""
    stalkd_args, redis_args = TIERS[tier]
    data = os.path.join(workdir, "data")
    os.makedirs(data, mode=0o700)
    sock = os.path.join(workdir, f"{system}.sock")
    if system == "stalkd":
        cmd = [sys.executable, "-m", "stalkd.cli", "serve", "-l", f"unix:{sock}"]
        cmd += [data if a == "DATA" else a for a in stalkd_args]
        env = {"BENCH_STALKD": f"unix:{sock}"}
        probe: tuple[bytes, bytes] = (b"stats-tube default\r\n", b"OK")
    else:
        redis = shutil.which("redis-server")
        if redis is None:
            raise SystemExit("redis-server is not installed (scripts/system-deps.sh installs it)")
        cmd = [redis, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
               "--dir", data, *redis_args]
        env = {"BENCH_REDIS": sock}
        probe = (b"PING\r\n", b"+PONG")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_socket(sock, proc, *probe)
        yield env, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_system(system: str, tier: str, sizes: dict[str, str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{system}-") as workdir, \
            unix_server(system, tier, workdir) as (server_env, pid):
        env = dict(os.environ, **server_env, **sizes, BENCH_SERVER_PID=str(pid))
        env["BENCH_JOBS"] = str(int(sizes["BENCH_JOBS"]) // SLOW.get(system, 1))
        here = os.path.dirname(os.path.abspath(__file__))
        done = subprocess.run([sys.executable, os.path.join(here, "peers", "measure.py"), system],
                              env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"{system} ({tier}) failed:\n{done.stderr[-3000:]}")
        result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


def _uptime() -> str:
    with open("/proc/loadavg") as f:
        return "load average " + ", ".join(f.read().split()[:3])


def _merge(best: dict[str, dict[str, float]], r: dict[str, object]) -> None:
    """Keep the best figure of each cell over rounds (the drain's CPU comes with its rate)."""
    cell = best.setdefault(str(r["system"]), {"bulk_api": float(bool(r["bulk_api"]))})
    cell["put_s"] = max(cell.get("put_s", 0.0), float(r["put_s"]))  # type: ignore[arg-type]
    cell["put_cpu"] = min(cell.get("put_cpu", float("inf")), float(r["put_cpu_us"]))  # type: ignore[arg-type]
    cell["bulk_s"] = max(cell.get("bulk_s", 0.0), float(r["bulk_s"]))  # type: ignore[arg-type]
    for label, d in r["configs"].items():  # type: ignore[attr-defined]
        if d["jobs_s"] > cell.get("drain_s", 0.0):
            cell.update(drain_s=d["jobs_s"], cpu=d["cpu_ms_per_1000"])
            cell["config"] = label  # type: ignore[assignment]
    lat = r["latency"]
    if lat["p99_ms"] < cell.get("p99_ms", float("inf")):  # type: ignore[index]
        cell.update(p50_ms=lat["p50_ms"], p99_ms=lat["p99_ms"])  # type: ignore[index]


def _report(tier: str, best: dict[str, dict[str, float]]) -> dict[str, float]:
    cols = [("put_s", "put/s", True), ("put_cpu", "put CPU us", False), ("bulk_s", "bulk/s", True), ("drain_s", "drain/s", True),
            ("cpu", "CPU ms/1k", False), ("p50_ms", "p50 ms", False), ("p99_ms", "p99 ms", False)]
    peers = [s for s in best if s != "stalkd"]
    print(f"\n[{tier}] " + ("stalkd in memory vs Redis at its defaults" if tier == "memory" else
                          "stalkd --dir (fsync always) vs Redis appendonly, appendfsync always"))
    print(f"{'system':<10}" + "".join(f"{h:>11}" for _, h, _ in cols) + "  best drain config")
    for s, cell in best.items():
        bulk_note = "" if cell["bulk_api"] else "*"
        row = "".join(f"{cell[k]:>10.1f}{bulk_note if k == 'bulk_s' else ' '}"
                      if k in ("p50_ms", "p99_ms") else
                      f"{cell[k]:>10.0f}{bulk_note if k == 'bulk_s' else ' '}" for k, _, _ in cols)
        print(f"{s:<10}{row}  {cell['config']}")
    ratios: dict[str, float] = {}
    line = []
    for k, h, higher_better in cols:
        ref = max(best[p][k] for p in peers) if higher_better else min(best[p][k] for p in peers)
        ratios[k] = best["stalkd"][k] / ref
        line.append(f"{h} {ratios[k]:.2f}x")
    print("stalkd / best peer per cell (rates: higher is better; CPU and latency: lower is "
          "better): " + ", ".join(line))
    return ratios


def peers(quick: bool, rounds: int) -> int:
    n = int(os.environ.get("WORKER_BENCH_JOBS", "3000" if quick else "10000"))
    sizes = {"BENCH_JOBS": str(n), "BENCH_PUTS": str(max(1000, n // 5)),
             "BENCH_LAT_N": "200" if quick else "400", "BENCH_LAT_RATE": "100"}
    print(f"worker vs peers: no-op task, 100 B payloads, 8 job slots per system, {n} jobs per "
          f"drain, {sizes['BENCH_PUTS']} single puts, {sizes['BENCH_LAT_N']} put->start samples "
          f"at {sizes['BENCH_LAT_RATE']}/s; every server on a UNIX socket; best of {rounds} "
          f"round(s), systems alternating; {os.cpu_count()} CPUs, {_uptime()}")
    results: dict[str, dict[str, dict[str, float]]] = {tier: {} for tier in TIERS}
    for _ in range(rounds):
        for tier in TIERS:
            for system in SYSTEMS:
                raw = run_system(system, tier, sizes)
                print(f"  {tier:<8} {json.dumps(raw)}", flush=True)
                _merge(results[tier], raw)
    ratios = {tier: _report(tier, best) for tier, best in results.items()}
    print("* no bulk API: a loop of single puts")
    print(f"\ntargets ({_uptime()} at the end):")
    for tier in TIERS:
        r = ratios[tier]
        print(f"  [{tier}] single put {r['put_s']:.2f}x (>= 1.0x: "
              f"{'met' if r['put_s'] >= 1.0 else 'MISSED'}), drain {r['drain_s']:.2f}x (>= 1.5x: "
              f"{'met' if r['drain_s'] >= 1.5 else 'MISSED'})")
    d = ratios["durable"]["p99_ms"]
    print(f"  [durable] put->start p99 {d:.2f}x the best durable peer's (<= 1.0x: "
          f"{'met' if d <= 1.0 else 'MISSED'})")
    return 0



def main() -> int:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        return 0
    if "--case" in sys.argv:
        i = sys.argv.index("--case")
        kind, address, n = sys.argv[i + 1], sys.argv[i + 2], int(sys.argv[i + 3])
        print(_case_in_process(kind, address, n))
        return 0
    if "--peer-src" in sys.argv:
        peer = sys.argv[sys.argv.index("--peer-src") + 1]
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
        return ab(peer, int(os.environ.get("WORKER_BENCH_JOBS", "2000")), rounds)
    return peers(quick="--quick" in sys.argv, rounds=int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 1)


if __name__ == "__main__":
    sys.exit(main())
