"""Worker end to end: jobs/s for a no-op task with 100 B payloads, stalkd's worker in its three
concurrency modes against RQ with a real Redis server, all measured in the same run.

Each case: pre-fill N jobs (not timed), start the workers, time until the queue is empty.
Servers: stalkd (in memory) and Debian's beanstalkd for the stalkd worker; redis-server for RQ;
each on an ephemeral 127.0.0.1 port, stopped by PID. RQ is measured with its default forking
``Worker`` (a fork per job, its production default) and with ``SimpleWorker`` (no fork, its
fastest mode); ratios are against the faster RQ figure with the same number of processes.

Run: .venv/bin/python bench/worker_bench.py [--quick]      (N: WORKER_BENCH_JOBS, default 4000)

``--peer-src DIR`` instead compares this tree's producer and worker with the stalkd in another
``src/`` directory (e.g. a ``git worktree`` of an older commit), on one stalkd server (in memory),
cases alternating between the two trees, each in a fresh process: ``task.put`` one at a time,
bulk put (``task.put_many``, or ``Client.put_many`` of encoded bodies where the peer has none),
and drain with ``threads x4`` (wall clock, and jobs per CPU second of the worker's process, which
load on the machine disturbs less). Ratios are this tree over the peer, best of ``--rounds``.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PAYLOAD = "x" * 100


def noop(payload: str) -> None:
    """The task both frameworks run."""
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}) before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@contextmanager
def server(cmd: list[str], port: int) -> Iterator[str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stalkd_server() -> tuple[list[str], int]:
    port = free_port()
    return [sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", str(port)], port


def beanstalkd_server() -> tuple[list[str], int] | None:
    exe = shutil.which("beanstalkd")
    if exe is None:
        return None
    port = free_port()
    return [exe, "-l", "127.0.0.1", "-p", str(port)], port


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


# --- RQ ---------------------------------------------------------------------------------------

def _rq_burst(port: int, qname: str, simple: bool) -> None:
    from redis import Redis
    from rq import Queue, SimpleWorker, Worker

    conn = Redis(port=port)
    cls = SimpleWorker if simple else Worker
    cls([Queue(qname, connection=conn)], connection=conn).work(burst=True, logging_level="ERROR")


def rq_case(port: int, processes: int, n: int, simple: bool) -> float:
    from redis import Redis
    from rq import Queue

    conn = Redis(port=port)
    qname = f"bench-{processes}-{simple}-{time.monotonic_ns()}"
    q = Queue(qname, connection=conn)
    for i in range(0, n, 500):
        with conn.pipeline() as pipe:
            q.enqueue_many([Queue.prepare_data(noop, (PAYLOAD,), result_ttl=0)
                            for _ in range(min(500, n - i))], pipeline=pipe)
            pipe.execute()
    assert q.count == n, q.count
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_rq_burst, args=(port, qname, simple)) for _ in range(processes)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - t0
    assert q.count == 0, f"RQ left {q.count} jobs"
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
    cmd, port = stalkd_server()
    best: dict[tuple[str, str], float] = {}
    with server(cmd, port) as address:
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
          f"{rounds}, one stalkd server (memory); {os.cpu_count()} CPUs")
    print(f"{'case':<28} {'this jobs/s':>12} {'peer jobs/s':>12}  ratio")
    labels = {"put": "task.put (one at a time)", "put_many": "bulk put", "drain": "drain threads x4",
              "drain-cpu": "drain, jobs per CPU s"}
    for kind, label in labels.items():
        a, b = best[kind, "this"], best[kind, "peer"]
        print(f"{label:<28} {a:>12.0f} {b:>12.0f}  {a / b:5.2f}x")
    return 0


def main() -> int:
    if "--case" in sys.argv:
        i = sys.argv.index("--case")
        kind, address, n = sys.argv[i + 1], sys.argv[i + 2], int(sys.argv[i + 3])
        print(_case_in_process(kind, address, n))
        return 0
    if "--peer-src" in sys.argv:
        peer = sys.argv[sys.argv.index("--peer-src") + 1]
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
        return ab(peer, int(os.environ.get("WORKER_BENCH_JOBS", "2000")), rounds)
    quick = "--quick" in sys.argv
    n = int(os.environ.get("WORKER_BENCH_JOBS", "1000" if quick else "4000"))
    n_fork = max(100, n // 10)  # RQ's forking worker is ~100x slower; keep its run short
    redis_exe = shutil.which("redis-server")
    if redis_exe is None:
        print("redis-server is not installed (scripts/system-deps.sh installs it)", file=sys.stderr)
        return 1
    rport = free_port()
    rq_rates: dict[str, float] = {}
    with server([redis_exe, "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no"], rport):
        rq_rates["rq Worker (fork/job) x1"] = rq_case(rport, 1, n_fork, simple=False)
        rq_rates["rq SimpleWorker x1"] = rq_case(rport, 1, n, simple=True)
        rq_rates["rq SimpleWorker x2"] = rq_case(rport, 2, n, simple=True)
    best1 = max(rq_rates["rq SimpleWorker x1"], rq_rates["rq Worker (fork/job) x1"])
    best2 = rq_rates["rq SimpleWorker x2"]

    cases: list[tuple[str, str, int, int]] = [  # label, mode, concurrency, processes
        ("threads x1", "threads", 1, 1), ("threads x4", "threads", 4, 1),
        ("asyncio x4", "asyncio", 4, 1), ("processes x2", "processes", 2, 2),
    ]
    servers: list[tuple[str, Callable[[], tuple[list[str], int] | None]]] = [
        ("stalkd", stalkd_server), ("beanstalkd", beanstalkd_server)]
    print(f"worker end to end, no-op task, 100 B payloads, {n} jobs per case "
          f"({n_fork} for RQ's forking Worker); {os.cpu_count()} CPUs")
    print(f"{'case':<38} {'jobs/s':>9}  ratio vs RQ (same #processes)")
    for label, rate in rq_rates.items():
        print(f"{label:<38} {rate:>9.0f}")
    for sname, make in servers:
        spec = make()
        if spec is None:
            print(f"({sname} not installed: skipped)")
            continue
        cmd, port = spec
        with server(cmd, port) as address:
            for label, mode, conc, procs in cases:
                rate = stalkd_case(address, mode, conc, n)
                ref = best1 if procs == 1 else best2
                print(f"{'stalkd worker ' + label + ' @' + sname:<38} {rate:>9.0f}  {rate / ref:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
