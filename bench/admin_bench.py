"""What watching and operating a server costs the clients it serves (issue 14).

0. The loop time one /metrics scrape costs (in-process, 200 tubes, 100k jobs).
1. Scraping /metrics every second, on put throughput at 16 connections (depth 1, 100 B,
   durability ``never`` by default, BENCH_DURABILITY=always for the fsync path): three variants measured in the same run, alternating, medians of
   ROUNDS: a server without ``--admin`` ("off"), a server with ``--admin`` nobody scrapes
   ("on"), and the same with a scraper fetching /metrics every second ("scraped").
   Target: scraped >= 0.97x off.
2. The longest stall another connection sees while the admin API deletes 100k buried jobs in
   bulk: a prober sends one cheap command at a time (``list-tube-used``) on its own connection
   and records every round trip, before (baseline) and during the bulk delete.
3. ``steps [PEER_SRC]`` (issue 30): at 100k tubes and 1M jobs, in process, each admin call's
   longest loop callback in CPU time of the thread (what it holds the loop, whatever else
   the machine runs), this tree next to ``PEER_SRC`` (e.g. main's src) measured in the same
   run (BENCH_STEP_TUBES, BENCH_STEP_JOBS).

The load generator is server_bench.py's (GEN_PROCS processes, raw pipelined sockets).
Run: ``.venv/bin/python bench/admin_bench.py [loop] [scrape] [bulk]`` (env: BENCH_SECONDS per run, default 2;
BENCH_ROUNDS, default 3; BENCH_BULK_JOBS, default 100000; GEN_PROCS, default 2).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from loadgen import generate  # noqa: E402  (the same load generator as the server bench)

SECONDS = float(os.environ.get("BENCH_SECONDS", "2"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
GEN_PROCS = int(os.environ.get("GEN_PROCS", "2"))
BULK_JOBS = int(os.environ.get("BENCH_BULK_JOBS", "100000"))
CONNS = 16
DURABILITY = os.environ.get("BENCH_DURABILITY", "never")  # never isolates the CPU cost from fsync noise


class Server:
    def __init__(self, data: str, admin: bool, *flags: str) -> None:
        fd, self.log_path = tempfile.mkstemp(prefix="admin-bench-", suffix=".log")
        args = [sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", "0",
                "--dir", data, "--durability", DURABILITY, "--log-level", "info", *flags]
        if admin:
            args += ["--admin", "127.0.0.1:0"]
        with os.fdopen(fd, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 60
        while True:
            with open(self.log_path) as f:
                text = f.read()
            port = re.search(r"stalkd listening on 127\.0\.0\.1:(\d+)", text)
            url = re.search(r"admin endpoint on (https?://\S+?)/ ", text)
            if port and (url or not admin):
                self.port = int(port.group(1))
                self.admin = url.group(1) if url else None
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{text}")
            time.sleep(0.02)

    def stop(self, keep_log: bool = False) -> None:
        died = self.proc.poll()
        self.proc.terminate()
        self.proc.wait(timeout=20)
        if died is not None:  # it exited before we stopped it: show why
            with open(self.log_path) as f:
                print(f"   server exited with {died}:\n" + "".join(f.readlines()[-15:]), file=sys.stderr)
        if keep_log:
            print(f"   server log kept: {self.log_path}", file=sys.stderr)
        else:
            os.unlink(self.log_path)


def put_rate(srv: Server, serial: int) -> float:
    tubes = [b"b%d-%d" % (serial, i) for i in range(CONNS)]
    q: mp.Queue[tuple[int, float, float]] = mp.Queue()
    t_start = time.time() + 0.3
    t_end = t_start + SECONDS
    procs = [mp.Process(target=generate, args=(srv.port, tubes[k::GEN_PROCS], b"x" * 100, 1, "put",
                                                t_start, t_end, q)) for k in range(GEN_PROCS)]
    for p in procs:
        p.start()
    while time.time() < t_start:
        time.sleep(0.001)
    w0 = time.time()
    results = []
    while len(results) < len(procs):
        try:
            results.append(q.get(timeout=1))
        except queue.Empty:  # a generator that died never reports: say so rather than hang
            if any(p.exitcode not in (None, 0) for p in procs) or srv.proc.poll() is not None:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"load generator or server died (server exit {srv.proc.poll()}, "
                                   f"generators {[p.exitcode for p in procs]}); server log: {srv.log_path}") from None
    for p in procs:
        p.join()
    return sum(r[0] for r in results) / (max(r[2] for r in results) - w0)


class Scraper(threading.Thread):
    """GET /metrics once a second until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url + "/metrics"
        self.stop_event = threading.Event()
        self.scrapes = 0
        self.bytes = 0
        self.error: OSError | None = None

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=10) as r:
                    self.bytes = len(r.read())
            except OSError as e:
                self.error = e
                return
            self.scrapes += 1
            self.stop_event.wait(1.0)


def scrape_cost() -> None:
    print(f"== put throughput, {CONNS} connections, depth 1, 100 B, {DURABILITY}; {ROUNDS} rounds of "
          f"{SECONDS:.1f} s, alternating (jobs/s, medians)")
    variants = ("off", "on", "scraped")
    with tempfile.TemporaryDirectory() as d:
        # one server per variant, each run once per round, so their WALs grow alike
        servers = {v: Server(os.path.join(d, v), v != "off") for v in variants}
        rates: dict[str, list[float]] = {v: [] for v in variants}
        failed = True
        try:
            for r in range(ROUNDS):
                order = variants[r % 3:] + variants[:r % 3]  # who goes first rotates
                for variant in order:
                    srv = servers[variant]
                    scraper = None
                    if variant == "scraped":
                        assert srv.admin is not None
                        scraper = Scraper(srv.admin)
                        scraper.start()
                    rates[variant].append(put_rate(srv, r))
                    if scraper is not None:
                        scraper.stop_event.set()
                        scraper.join()
                        if scraper.error is not None:
                            raise RuntimeError(f"scrape failed: {scraper.error}; server log: {srv.log_path}")
                        print(f"   (scraped {scraper.scrapes} times, {scraper.bytes} bytes each)")
            failed = False
        finally:
            for srv in servers.values():
                srv.stop(keep_log=failed)
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k in variants:
        print(f"   {k:8s} {med[k]:9.0f} jobs/s  ({', '.join(f'{x:.0f}' for x in rates[k])})")
    print(f"   on/off {med['on'] / med['off']:.3f}x   scraped/off {med['scraped'] / med['off']:.3f}x"
          f"   scraped/on {med['scraped'] / med['on']:.3f}x   (target scraped/off >= 0.97x)")


def scrape_loop_time(tubes: int = 200, jobs: int = 100_000) -> None:
    """The loop time one /metrics scrape takes (it runs on the server's loop): the collector
    and the text encoding, in-process, with ``tubes`` tubes and ``jobs`` jobs."""
    from stalkd.admin.metrics import Instruments, Reading, exposition
    from stalkd.engine import Engine
    from stalkd.engine import commands as C
    from stalkd.server.app import Server
    from stalkd.server.config import Config

    eng = Engine(records=False)
    eng.connect(1, 0.0)
    for i in range(jobs):
        if i % (jobs // tubes) == 0:
            eng.apply(1, C.Use(f"tube-{i}"), 0.0)
        eng.apply(1, C.Put(0, 0, 60, b"x"), 0.0)
    srv = Server(Config(), eng)
    ins = Instruments()
    on_loop, encode = [], []
    for _ in range(50):
        t0 = time.perf_counter()
        reading = Reading(srv, ins, None)
        t1 = time.perf_counter()
        text = exposition(reading)
        encode.append(time.perf_counter() - t1)
        on_loop.append(t1 - t0)
    loop_ms, enc_ms = 1000 * statistics.median(on_loop), 1000 * statistics.median(encode)
    print(f"== one /metrics scrape, {tubes} tubes, {jobs} jobs, {len(text)} bytes: reading on the "
          f"loop {loop_ms:.2f} ms (median), encoding in a worker thread {enc_ms:.2f} ms; "
          f"loop held {loop_ms / (loop_ms + enc_ms):.1%} of what encoding on the loop would")


def bury_many(port: int, tube: bytes, n: int) -> None:
    """``n`` buried jobs in ``tube``, pipelined 1000 at a time (ids are sequential)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"use %s\r\nwatch %s\r\nignore default\r\n" % (tube, tube))
        got = b""
        while got.count(b"\r\n") < 3:
            got += s.recv(1 << 16)
        first = 1
        while n:
            k = min(n, 1000)
            s.sendall(b"put 0 0 600 16\r\n0123456789abcdef\r\n" * k)
            s.sendall(b"".join(b"reserve-with-timeout 0\r\nbury %d 0\r\n" % i
                               for i in range(first, first + k)))
            want, got = 4 * k, b""  # INSERTED, RESERVED + body line, BURIED
            while got.count(b"\r\n") < want:
                got += s.recv(1 << 20)
            if got.count(b"BURIED\r\n") != k:
                raise RuntimeError(f"could not bury: {got[-200:]!r}")
            first += k
            n -= k


class Prober(threading.Thread):
    """One command at a time on its own connection; every round trip recorded."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rtts: list[float] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            t0 = time.perf_counter()
            self.sock.sendall(b"list-tube-used\r\n")
            got = b""
            while not got.endswith(b"\r\n"):
                got += self.sock.recv(256)
            self.rtts.append(time.perf_counter() - t0)

    def take(self) -> list[float]:
        out, self.rtts = self.rtts, []
        return out


def _summary(rtts: list[float]) -> str:
    s = sorted(rtts)
    return (f"{len(s)} round trips, p50 {1000 * s[len(s) // 2]:.2f} ms, "
            f"p99 {1000 * s[int(len(s) * 0.99)]:.2f} ms, max {1000 * s[-1]:.1f} ms")


def bulk_stall() -> None:
    print(f"== stall seen by another connection during a bulk delete of {BULK_JOBS} buried jobs "
          "(admin API, always)")
    with tempfile.TemporaryDirectory() as d:
        srv = Server(os.path.join(d, "bulk"), True)
        try:
            t0 = time.perf_counter()
            bury_many(srv.port, b"bulk", BULK_JOBS)
            print(f"   preload (put + reserve + bury, pipelined): {time.perf_counter() - t0:.1f} s")
            prober = Prober(srv.port)
            prober.start()
            time.sleep(1.0)  # the baseline window
            base = prober.take()
            body = json.dumps({"tube": "bulk", "state": "buried"}).encode()
            assert srv.admin is not None
            req = urllib.request.Request(srv.admin + "/api/v1/jobs/delete", data=body,
                                         headers={"Content-Type": "application/json"})
            t0 = time.perf_counter()
            with urllib.request.urlopen(req, timeout=600) as r:
                out = json.loads(r.read())
            took = time.perf_counter() - t0
            during = prober.take()
            prober.stop_event.set()
            prober.join()
        finally:
            srv.stop()
    print(f"   bulk delete: {out['outcomes']} in {took:.2f} s ({BULK_JOBS / took:.0f} jobs/s)")
    print(f"   baseline: {_summary(base)}")
    print(f"   during:   {_summary(during)}")
    print(f"   longest stall during / baseline max: {max(during) / max(base):.1f}x")


STEP_TUBES = int(os.environ.get("BENCH_STEP_TUBES", "100000"))
STEP_JOBS = int(os.environ.get("BENCH_STEP_JOBS", "1000000"))


def admin_steps_child() -> None:
    """(Run in a child, on the tree its PYTHONPATH names.) The longest loop callback and the
    whole CPU time of the thread of each admin call at STEP_TUBES tubes of one job and the other jobs
    delayed in tube ``big``: one JSON line per call."""
    import asyncio
    import gc
    import inspect

    from stalkd.admin.metrics import Instruments, Reading
    from stalkd.admin.ops import AdminOps, encode_answer
    from stalkd.engine import Engine
    from stalkd.protocol import commands as C
    from stalkd.protocol.replies import encode_reply
    from stalkd.server.app import Server
    from stalkd.server.config import Config
    from stalkd.server.gcpolicy import GcPolicy

    eng = Engine()
    eng.connect(1, 0.0)
    for i in range(STEP_TUBES):
        eng.apply(1, C.Use(f"a{i:07d}"), 0.0)
        eng.apply(1, C.Put(0, 0, 60, b"x"), 0.0)
    eng.apply(1, C.Use("big"), 0.0)
    for _ in range(STEP_JOBS - STEP_TUBES):
        eng.apply(1, C.Put(0, 3600, 60, b"x"), 0.0)
    srv = Server(Config(), eng, clock=lambda: 1.0)
    ops = AdminOps(srv)
    gc.collect()
    gc.freeze()
    # as the server runs: full collections on a timer (gcpolicy.py), not in these calls (without
    # it a full collection of the moved jobs lands in whichever call crosses the threshold)
    GcPolicy(now=0.0).start()
    worst = [0.0]
    run = asyncio.events.Handle._run

    def timed(self: asyncio.Handle) -> None:
        t0 = time.thread_time()
        run(self)
        worst[0] = max(worst[0], time.thread_time() - t0)

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]

    async def call(f, *args, **kw):  # type: ignore[no-untyped-def]
        out = f(*args, **kw)
        return (await out) if inspect.isawaitable(out) else out

    def apply(cmd: object) -> object:  # and the reply's encoding, but stats' (the server completes it)
        reply = eng.apply(1, cmd, 1.0).reply  # type: ignore[arg-type]
        return reply if isinstance(cmd, C.Stats) else encode_reply(reply)  # type: ignore[arg-type]

    async def stats() -> object:
        """The engine's part, then the job totals it left to the server (counted a slice per
        loop turn), where the tree has them (server/stattotals.py)."""
        reply = apply(C.Stats())
        try:
            from stalkd.server.stattotals import StatsTotals
        except ImportError:  # an older tree: the engine counted them
            return reply
        loop = asyncio.get_running_loop()
        counted = loop.create_future()
        StatsTotals(lambda: eng.tube_order, loop.call_soon).ask(counted.set_result)
        return reply, await counted

    async def move() -> object:
        return await encode_answer(await ops.move(await ops.select(None, "big", "delayed"), "moved"))

    async def delete() -> object:
        return await ops.delete(await ops.select(None, "moved", "delayed"))

    calls = [
        ("overview", lambda: call(ops.overview)),
        ("overview offset=99500", lambda: call(ops.overview, 99_500)),
        ("overview sort=jobs", lambda: call(ops.overview, 0, 50, sort="jobs")),
        ("overview q=a0099", lambda: call(ops.overview, 0, 50, q="a0099")),
        ("buried", lambda: call(ops.oldest_buried, 50)),
        ("workers", lambda: call(ops.workers)),  # the first imports the worker modules
        ("workers, again", lambda: call(ops.workers)),  # (the endpoint imports them at start)
        ("tubes/big/jobs", lambda: call(ops.jobs, "big", "delayed")),
        ("metrics (reading)", lambda: Reading.take(srv, Instruments(), None)),
        ("list-tubes", lambda: call(apply, C.ListTubes())),
        ("stats", stats),
        ("move 900k", move),
        ("delete 900k", delete),
    ]
    for name, f in calls:
        worst[0] = 0.0
        t0 = time.thread_time()
        try:
            asyncio.run(f())
        except TypeError as e:  # a parameter this tree does not have
            print(json.dumps({"call": name, "error": str(e)}), flush=True)
            continue
        print(json.dumps({"call": name, "worst_ms": worst[0] * 1e3,
                          "cpu_s": time.thread_time() - t0}), flush=True)


def admin_steps(peer: str | None) -> None:
    """Each admin call's longest loop callback (CPU ms), this tree next to ``peer``'s."""
    trees = [("stalkd", os.path.join(HERE, "..", "src"))] + ([("peer", peer)] if peer else [])
    got: dict[str, dict[str, str]] = {}
    for label, src in trees:
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
        out = subprocess.run([sys.executable, __file__, "steps-child"], env=env, check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            row = json.loads(line)
            got.setdefault(row["call"], {})[label] = (
                f"{row['worst_ms']:8.1f} {row['cpu_s']:7.3f}" if "worst_ms" in row else f"{'(none)':>16}")
    print(f"# longest loop callback (CPU ms of the thread) and the call's CPU s in all; "
          f"{STEP_TUBES} tubes, {STEP_JOBS} jobs; load {os.getloadavg()[0]:.1f}")
    print(f"{'call':<24} {'stalkd ms':>8} {'s':>7}   " + ("  peer ms       s" if peer else ""))
    for name, cols in got.items():
        print(f"{name:<24} {cols.get('stalkd', ''):>16}   {cols.get('peer', '')}", flush=True)


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        raise SystemExit(__doc__)
    parts = sys.argv[1:] or ["loop", "scrape", "bulk"]  # e.g. `admin_bench.py bulk`
    if "loop" in parts:
        scrape_loop_time()
    if "scrape" in parts:
        scrape_cost()
    if "bulk" in parts:
        bulk_stall()
    if "steps-child" in parts:
        admin_steps_child()
    elif "steps" in parts:  # admin_bench.py steps [PEER_SRC]
        admin_steps(parts[parts.index("steps") + 1] if len(parts) > parts.index("steps") + 1 else None)
