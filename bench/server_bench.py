"""stalkd vs Debian's beanstalkd, same machine, same run, alternating: throughput ratios per cell.

Matrix (issue 4): workload {put, reserve+delete} x body {100 B, 4 KiB} x connections {1, 16}
x pipeline depth {1, 64}, in three durability classes:
  always  stalkd --dir (fsync before every acknowledgement)  vs  beanstalkd -b -f 0
  never   stalkd --dir -F                                     vs  beanstalkd -b -F
  memory  stalkd (no dir)                                     vs  beanstalkd (no -b)
plus end-to-end put -> reserve latency (p50/p99) and server CPU microseconds per job.

The load generator (loadgen.py) is Python: ``GEN_PROCS`` processes, each driving its share of the
connections over raw non-blocking sockets with pipelining. To show it is not the bottleneck,
every cell prints the server's CPU use (from /proc, % of one core) next to the generator's:
a server near 100 % is saturated; a generator near 100 % x GEN_PROCS with an idle server
means the number says more about Python than about the server.

Each cell runs ROUNDS times, stalkd and beanstalkd alternating (who goes first alternates too),
and the medians are printed: the machine this was written on is shared and noisy. With the
floor, ``st/fl by round`` is stalkd/floor within each round (run back to back): its median and
quartiles, steadier than the ratio of the two medians when the machine's speed drifts.

Run: ``.venv/bin/python bench/server_bench.py`` (env: BENCH_SECONDS per run, default 0.5;
BENCH_ROUNDS, default 3; BENCH_CLASSES=always,never,memory; BENCH_QUICK=1 for a 4-cell smoke
run; GEN_PROCS=2; BENCH_DATA_DIR, default /var/tmp, holds the servers' data directories; BENCH_SERVER_LOG=FILE keeps the servers' stderr, and with BENCH_LOG_LEVEL=info
stalkd's stop line reports records per fsync). A subset while iterating, e.g.
``bench/server_bench.py --class memory --work put --size 100 --conns 1 --depth 1 --no-latency``
(each option may be repeated). ``--peer-src DIR`` replaces beanstalkd by the stalkd of another
source tree (say a ``git worktree`` of the last commit): an A/B run of a change, same alternation.
``--tls`` runs the TLS listener against the plain one instead (tls_bench.py). ``--split`` (needs
perf) runs each depth-1 cell once more per server, stalkd and the floor, and splits its round
trips into the time in the server (a request read -> its reply written) and outside it (the
client and the wake-ups): at depth 1 the rate is one over the round trip, most of which no
server decides (bench/serve_split.py).

Start-up cells (exec -> accepting, exec -> first reply) run in memory and with an empty data
directory; ``--startup-only`` prints only those (with ``--peer-src``, an A/B of start-up). The
``floor`` start-up cell is the least a Python server on asyncio and uvloop takes to its first
reply here: it listens first (as stalkd does), then imports them and answers any line (in
memory only).

stalkd runs twice per cell when its C accelerator is built: ``stalkd`` (the default, with it)
and ``stalkd-py`` (``STALKD_NO_EXTENSIONS=1``, the pure-Python modules), in the same
alternation, so each line shows both against beanstalkd and ``C/py``; ``--no-pure`` skips the
second one. Every cell also runs the floor server (bench/floor_server.py: parses a put, a
reserve and a delete, keeps the jobs in a queue; in ``never`` it writes each put and delete to a
file, in ``always`` it fdatasyncs them too), in the same alternation, for ``st/fl``: stalkd's
rate over what a trivial Python server reaches; ``--no-floor`` skips it.

After the matrix, "targets (issue 12)" judges the cells the issue sets targets for (targets.py):
the ratio, the target, met or NOT met and, for a miss, the reason in this run's figures;
target cells the run did not measure are listed with the options that measure them.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import serve_split
import targets
from loadgen import generate, preload

SECONDS = float(os.environ.get("BENCH_SECONDS", "0.5"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))  # alternating rounds per cell; medians reported
GEN_PROCS = int(os.environ.get("GEN_PROCS", "2"))
CLASSES = os.environ.get("BENCH_CLASSES", "always,never,memory").split(",")
QUICK = os.environ.get("BENCH_QUICK") == "1"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from support import listening_ports, wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)

STALKD = [sys.executable, "-m", "stalkd.cli", "serve"]
FLOOR = [sys.executable, os.path.join(HERE, "floor_server.py")]
TICKS = os.sysconf("SC_CLK_TCK")
# BENCH_LOG_LEVEL=info with BENCH_SERVER_LOG=FILE: stalkd logs records per fsync when it stops.
SERVER_LOG_LEVEL = os.environ.get("BENCH_LOG_LEVEL", "warning")
# Where the servers' data directories go. A file system of the benchmark's own (say a loop-mounted
# ext4 image) keeps other processes' metadata out of the journal commits the fsyncs wait for.
DATA_DIR = os.environ.get("BENCH_DATA_DIR", "/var/tmp")


# --- servers --------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    data_dir: str | None
    durability: str  # the class: always | never | memory

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def wait_ready(proc: subprocess.Popen[bytes], timeout: float = 60.0, what: str = "server") -> int:
    """The port ``proc`` (started on port 0) listens on, once it answers a command there.

    The port comes from /proc (tests/support.py), so no port is picked here and bound later.
    stalkd binds before it recovers (and, with --archive, before it loads pyarrow), so an
    accepted connection alone would let a run's first command wait out the rest of the start-up
    and count it as that run's longest wait; a server under valgrind takes seconds to get there.
    """
    deadline = time.monotonic() + timeout
    port = wait_for_listener(proc, timeout, what)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=max(0.1, deadline - time.monotonic())) as s:
                s.sendall(b"list-tube-used\r\n")
                if s.recv(64):  # any reply line (the floor server's are fixed)
                    return port
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.01)


PEER_SRC: str | None = None  # --peer-src: the "beanstalkd" column runs this stalkd tree instead


def command(kind: str, klass: str, data_dir: str | None,
            extra: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str] | None]:
    """(argv, environment or None) of a server of ``kind`` in durability ``klass`` on port 0;
    ``extra`` flags go to stalkd and the floor, not to beanstalkd."""
    env = None
    if kind == "beanstalkd" and PEER_SRC is not None:
        kind, env = "stalkd", {**os.environ, "PYTHONPATH": PEER_SRC}
    if kind == "stalkd-py":
        kind, env = "stalkd", {**os.environ, "STALKD_NO_EXTENSIONS": "1"}
    if kind == "stalkd":
        args = [*STALKD, "-l", "127.0.0.1", "-p", "0", "--log-level", SERVER_LOG_LEVEL]
        if data_dir:
            args += ["-b", data_dir] + (["-F"] if klass == "never" else [])
        return args + list(extra), env
    if kind == "floor":  # durable: a write per put and delete, and in `always` an fdatasync before the reply
        args = list(FLOOR)
        if data_dir:
            args += ["--sync-dir", data_dir] + (["--no-fsync"] if klass == "never" else [])
        return args + list(extra), env
    args = ["beanstalkd", "-l", "127.0.0.1", "-p", "0"]
    if data_dir:
        args += ["-b", data_dir] + (["-F"] if klass == "never" else ["-f", "0"])
    return args, env


def launch(name: str, args: list[str], klass: str, data_dir: str | None, env: dict[str, str] | None = None,
           timeout: float = 60.0, **popen: object) -> Server:
    """Run ``args`` (a server listening on port 0) and return it once it answers."""
    # BENCH_SERVER_LOG=FILE keeps the servers' stderr (a server that dies mid-run says why there).
    log_path = os.environ.get("BENCH_SERVER_LOG")
    err = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - child keeps it
    popen = {"stdout": subprocess.DEVNULL, "stderr": err, **popen}
    proc = subprocess.Popen(args, env=env, **popen)  # type: ignore[call-overload]
    try:
        port = wait_ready(proc, timeout, name)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return Server(name, proc, port, data_dir, klass)


def start(kind: str, klass: str, extra: tuple[str, ...] = ()) -> Server:
    """A server of ``kind`` (stalkd, stalkd-py, floor, beanstalkd) in durability ``klass``;
    ``extra`` flags go to stalkd and the floor."""
    data_dir = tempfile.mkdtemp(prefix=f"bench-{kind}-", dir=DATA_DIR) if klass != "memory" else None
    args, env = command(kind, klass, data_dir, extra)
    return launch(kind, args, klass, data_dir, env)


_cell_serial = 0


def run_cell(srv: Server, work: str, size: int, n_conns: int, depth: int) -> tuple[float, float, float]:
    """(jobs/s, server CPU % of a core, generator CPU % of a core) for one cell."""
    global _cell_serial
    _cell_serial += 1
    body = b"x" * size
    tubes = [b"c%d-%d" % (_cell_serial, i) for i in range(n_conns)]
    if work == "rd":
        # A fixed stock (a connection that runs out stops; the rate counts until the last one
        # stopped). Small for `always`, where beanstalkd -f 0 preloads at one fsync per put.
        stock = 3000 if srv.durability == "always" else 20000
        preload(srv.port, tubes, body, max(64, stock // n_conns))
    procs = max(1, min(GEN_PROCS, n_conns))
    q: mp.Queue[tuple[int, float, float]] = mp.Queue()
    t_start = time.time() + 0.3
    t_end = t_start + SECONDS
    children = []
    for k in range(procs):
        share = tubes[k::procs]
        p = mp.Process(target=generate, args=(srv.port, share, body, depth, work, t_start, t_end, q))
        p.start()
        children.append(p)
    while time.time() < t_start:
        time.sleep(0.001)
    cpu0 = srv.cpu_seconds()
    w0 = time.time()
    results = [q.get(timeout=120) for _ in children]
    cpu1 = srv.cpu_seconds()
    wall = max(r[2] for r in results) - w0
    for p in children:
        p.join()
    jobs = sum(r[0] for r in results)
    gen_cpu = sum(r[1] for r in results)
    return jobs / wall, 100 * (cpu1 - cpu0) / wall, 100 * gen_cpu / wall


def latency(srv: Server, samples: int = 300) -> tuple[float, float]:
    """put on one connection -> RESERVED on another (blocked in reserve): p50, p99 in ms."""
    tube = b"lat%d" % os.getpid()
    p = socket.create_connection(("127.0.0.1", srv.port))
    c = socket.create_connection(("127.0.0.1", srv.port))
    for s in (p, c):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    p.sendall(b"use %s\r\n" % tube)
    p.recv(100)
    c.sendall(b"watch %s\r\n" % tube)
    c.recv(100)
    out = []
    for _ in range(samples):
        c.sendall(b"reserve\r\n")
        t0 = time.perf_counter()
        p.sendall(b"put 0 0 60 5\r\nhello\r\n")
        got = b""
        while not got.endswith(b"hello\r\n"):
            got += c.recv(4096)
        out.append(time.perf_counter() - t0)
        jid = got.split()[1]
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += p.recv(100)  # INSERTED
        c.sendall(b"delete %s\r\n" % jid)
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += c.recv(100)
    p.close()
    c.close()
    out.sort()
    return out[len(out) // 2] * 1000, out[min(len(out) - 1, int(len(out) * 0.99))] * 1000


# The least any Python server on asyncio and uvloop takes to answer (start-up cells, kind
# "floor"): it listens on port 0 first, as stalkd does (the kernel queues a client meanwhile),
# then imports asyncio and uvloop and answers every line with a fixed reply.
_START_FLOOR = """
import socket
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(128)
import asyncio, uvloop
class Reply(asyncio.Protocol):
    def connection_made(self, transport): self.transport = transport
    def data_received(self, data): self.transport.write(b"USING default\\r\\n")
async def main():
    server = await asyncio.get_running_loop().create_server(Reply, sock=sock)
    await server.serve_forever()
uvloop.run(main())
"""


def startup(kind: str, runs: int = 7, empty_dir: bool = False) -> tuple[float, float, float]:
    """Median ms from exec to (a) the port listening (seen in /proc), (b) the first reply, and
    (c) the CPU the server used up to its first reply (it is killed at once and its rusage read:
    on a loaded machine wall times swell with the run queue, CPU time much less); in memory, or
    (``empty_dir``) with a new, empty data directory (durable defaults)."""
    listen, first, cpu = [], [], []
    for _ in range(runs):
        data_dir = tempfile.mkdtemp(prefix=f"bench-start-{kind}-", dir=DATA_DIR) if empty_dir else None
        if kind == "floor":  # in memory only: it stores nothing
            args, env = [sys.executable, "-c", _START_FLOOR], None
        else:
            args, env = command(kind, "always" if empty_dir else "memory", data_dir)
        t0 = time.monotonic()
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not (ports := listening_ports(proc.pid)):
                if proc.poll() is not None or time.monotonic() - t0 > 30:
                    raise RuntimeError(f"{kind} did not listen (exit status {proc.poll()})")
                time.sleep(0.0005)
            listen.append(time.monotonic() - t0)
            with socket.create_connection(("127.0.0.1", ports[0]), timeout=30) as s:
                s.sendall(b"list-tube-used\r\n")
                s.recv(100)
            first.append(time.monotonic() - t0)
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu.append(usage.ru_utime + usage.ru_stime)
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
            if data_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
    return statistics.median(listen) * 1000, statistics.median(first) * 1000, statistics.median(cpu) * 1000


FIRST_REPLY_TARGET_MS = 50.0  # issue 34: exec -> first reply, in memory and with an empty data directory


def startup_verdict(firsts: dict[tuple[str, bool], float]) -> str:
    """The start-up target's line: stalkd's first reply in memory and with an empty data
    directory against ``FIRST_REPLY_TARGET_MS``, next to the bare floor's (in memory), which says
    whether any asyncio and uvloop server reaches the target on this machine at this moment."""
    mem, empty = firsts.get(("stalkd", False)), firsts.get(("stalkd", True))
    got = [ms for ms in (mem, empty) if ms is not None]
    met = "met" if got and max(got) <= FIRST_REPLY_TARGET_MS else "NOT met"
    text = (f"# target (issue 34): first reply <= {FIRST_REPLY_TARGET_MS:.0f} ms: stalkd "
            + " / ".join(f"{ms:.1f} ms {where}" for ms, where in ((mem, "in memory"), (empty, "empty dir"))
                         if ms is not None)
            + f": {met}")  # fmt: skip
    floor = firsts.get(("floor", False))
    if floor is not None:
        misses = "misses it too" if floor > FIRST_REPLY_TARGET_MS else "meets it"
        text += (f"; the bare asyncio+uvloop floor {floor:.1f} ms in memory ({misses}); "
                 f"stalkd in memory {mem - floor:+.1f} ms over it" if mem is not None else "")
    return text


def import_floor(runs: int = 7) -> dict[str, tuple[float, float]]:
    """Median wall and CPU ms of a bare interpreter, of importing asyncio (and uvloop), and of
    importing the server (this tree's, or ``--peer-src``'s as "peer"): what no start-up of a
    Python asyncio server gets under, next to what stalkd's own imports add."""
    statements = {"python -c pass": "pass", "import asyncio": "import asyncio",
                  "import asyncio, uvloop": "import asyncio, uvloop",
                  "import the server's start-up": "import stalkd.node.serve"}  # fmt: skip
    cases = [(label, code, None) for label, code in statements.items()]
    if PEER_SRC is not None:  # an older tree kept its start-up in stalkd.server.serve
        module = "node" if os.path.exists(os.path.join(PEER_SRC, "stalkd", "node", "serve.py")) else "server"
        cases.append(("peer: import the server's start-up", f"import stalkd.{module}.serve", PEER_SRC))
    wall: dict[str, list[float]] = {c[0]: [] for c in cases}
    cpu: dict[str, list[float]] = {c[0]: [] for c in cases}
    for _ in range(runs):
        for label, code, src in cases:
            env = None if src is None else {**os.environ, "PYTHONPATH": src}
            t0 = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-c", code], env=env)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall[label].append(time.monotonic() - t0)
            cpu[label].append(usage.ru_utime + usage.ru_stime)
    return {k: (statistics.median(wall[k]) * 1000, statistics.median(cpu[k]) * 1000) for k in wall}


# In one child, as ``stalkd serve`` runs them (the collector off, as node/cli.py keeps it):
# asyncio and uvloop, then what serving in memory imports, then what a data directory adds.
_IMPORT_SPLIT = """
import gc, sys, tempfile, time
gc.disable()
t0 = time.perf_counter()
import asyncio, uvloop
t1 = time.perf_counter()
from stalkd.server.config import parse_args
from stalkd.node.serve import preload
preload(parse_args([]))
t2 = time.perf_counter()
preload(parse_args(["-b", tempfile.gettempdir()]))
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def import_split(runs: int = 7) -> tuple[float, float, float]:
    """Median ms, inside one process, of importing asyncio and uvloop, then what ``stalkd serve``
    imports before it serves in memory, then what serving a data directory adds (``preload``):
    with the floor server's first reply, what the imports alone put a durable start at."""
    got = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _IMPORT_SPLIT], capture_output=True, text=True, check=True)
        got.append(tuple(float(x) for x in out.stdout.split()))
    return tuple(statistics.median(g[i] for g in got) * 1000 for i in range(3))  # type: ignore[return-value]


# --- the matrix -----------------------------------------------------------------------------


def _median(runs: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """The run with the median throughput (its CPU figures belong to the same run)."""
    return sorted(runs)[len(runs) // 2]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # run the finally blocks: servers stopped, data dirs removed


def _cell(servers: dict[str, Server], kinds: list[str], work: str, size: int, n: int,
          depth: int) -> tuple[dict[str, targets.Measure], tuple[float, ...]]:
    """Each server's median run of one cell, ROUNDS rounds, who goes first alternating; and
    stalkd/floor in each round (empty without the floor)."""
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
    for r in range(ROUNDS):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            runs[kind].append(run_cell(servers[kind], work, size, n, depth))
    paired = tuple(s[0] / f[0] for s, f in zip(runs["stalkd"], runs.get("floor", ()), strict=False) if f[0])
    return {k: targets.Measure(*_median(v)) for k, v in runs.items()}, paired


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def _split_line(servers: dict[str, Server], kinds: list[str], work: str, size: int, n: int) -> str:
    """``--split``: one more run of the cell per server (stalkd, the floor) under perf record,
    its round trips split into the time in the server and outside it (bench/serve_split.py)."""
    parts = []
    for kind in ("stalkd", "floor"):
        if kind in kinds:
            srv = servers[kind]
            got = serve_split.record(srv.proc.pid, lambda srv=srv: run_cell(srv, work, size, n, 1))  # type: ignore[misc]
            parts.append(f"{kind} " + (got.text() if got is not None else "no request traced"))
    return "#   round trip split: " + "; ".join(parts)


def _header(pure: bool, floor: bool) -> str:
    return (f"{'class':6} {'work':4} {'size':>5} {'conns':>5} {'depth':>5} | "
            f"{'stalkd/s':>9} {'srv%':>4} {'gen%':>4} {'us/job':>6} | "
            + (f"{'stalkd-py/s':>11} {'us/job':>6} | " if pure else "")
            + f"{'beanstalkd/s':>12} {'srv%':>4} {'gen%':>4} {'us/job':>6} | "
            + (f"{'floor/s':>9} {'srv%':>4} {'us/job':>6} | " if floor else "")
            + f"{'ratio':>6}"
            + (f" {'py/bs':>6} {'C/py':>6}" if pure else "")
            + (f" {'st/fl':>6} {'st/fl by round':>18}" if floor else ""))


def _line(row: targets.Row, py: targets.Measure | None, floor: bool) -> str:
    """One cell's line under ``_header`` (stalkd-py's columns when ``py`` is given)."""
    c, s, b, f = row.cell, row.stalkd, row.peer, row.floor
    text = (f"{c.klass:6} {c.work:4} {c.size:5} {c.conns:5} {c.depth:5} | "
            f"{s.rate:9.0f} {s.srv:4.0f} {s.gen:4.0f} {s.us_per_job:6.1f} | ")
    if py is not None:
        text += f"{py.rate:11.0f} {py.us_per_job:6.1f} | "
    text += f"{b.rate:12.0f} {b.srv:4.0f} {b.gen:4.0f} {b.us_per_job:6.1f} | "
    if floor:  # dashes where it did not run
        text += f"{f.rate:9.0f} {f.srv:4.0f} {f.us_per_job:6.1f} | " if f else f"{'-':>9} {'-':>4} {'-':>6} | "
    text += f"{row.ratio:6.2f}x"
    if py is not None:
        text += f" {_ratio(py.rate, b.rate):5.2f}x {_ratio(s.rate, py.rate):5.2f}x"
    if floor:
        text += f" {_ratio(s.rate, f.rate):5.2f}x {row.floor_paired():>18}" if f else f" {'-':>6}"
    return text


def _options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Each cell option may be repeated; without it, every value shown in its help runs.\n"
               "Environment: BENCH_SECONDS (per run, default 0.5), BENCH_ROUNDS (3), GEN_PROCS (2),\n"
               "BENCH_CLASSES, BENCH_QUICK=1, BENCH_DATA_DIR (/var/tmp), BENCH_SERVER_LOG=FILE.\n"
               "The targets section judges issue 12's cells (100 B, depth 1): --size 100 --depth 1\n"
               "measures every one of them; cells left out are listed with the options that run them.")
    cells = ap.add_argument_group("cells")
    cells.add_argument("--class", dest="classes", action="append", choices=["always", "never", "memory"],
                       help="durability class (default: all three)")
    cells.add_argument("--work", action="append", choices=["put", "rd"], help="put, or rd = reserve+delete (default both)")
    cells.add_argument("--size", action="append", type=int, metavar="BYTES", help="job body (default 100 and 4096)")
    cells.add_argument("--conns", action="append", type=int, metavar="N", help="connections (default 1 and 16)")
    cells.add_argument("--depth", action="append", type=int, metavar="N",
                       help="commands in flight per connection (default 1 and 64)")
    ap.add_argument("--no-latency", action="store_true", help="skip the put->reserve latency runs")
    ap.add_argument("--no-startup", action="store_true", help="skip the start-up timings")
    ap.add_argument("--startup-only", action="store_true",
                    help="only the start-up timings (in memory and with an empty data directory)")
    ap.add_argument("--no-pure", action="store_true",
                    help="do not also run stalkd on its pure-Python modules (STALKD_NO_EXTENSIONS=1)")
    ap.add_argument("--no-floor", action="store_true",
                    help="do not run the floor server (bench/floor_server.py)")
    ap.add_argument("--peer-src", metavar="DIR",
                    help="compare with the stalkd in this src/ directory, not beanstalkd (no targets then)")
    ap.add_argument("--split", action="store_true",
                    help="at depth 1, also split each round trip into the time in the server (request read -> "
                    "reply written) and outside it, stalkd's and the floor's (one more run each, under perf)")
    ap.add_argument("--tls", action="store_true",
                    help="TLS listener vs plain listener, and beanstalkd behind stunnel (tls_bench.py)")
    opts = ap.parse_args()
    if opts.split and shutil.which("perf") is None:
        ap.error("--split records the servers' system calls with perf: install perf (linux-perf)")
    return opts


def main() -> int:
    global PEER_SRC
    opts = _options()
    if opts.tls:
        from tls_bench import main as main_tls

        return main_tls()
    if opts.peer_src:
        PEER_SRC = os.path.abspath(opts.peer_src)
        print(f"# A/B: the beanstalkd column is stalkd from {PEER_SRC}")
    signal.signal(signal.SIGTERM, _interrupt)
    if shutil.which("beanstalkd") is None:
        print("beanstalkd is not installed (scripts/system-deps.sh)", file=sys.stderr)
        return 1
    works = ["put", "rd"]
    sizes = [100, 4096]
    conns = [1, 16]
    depths = [1, 64]
    classes = CLASSES
    if QUICK:
        sizes, conns = [100], [1]
    works, sizes, conns = opts.work or works, opts.size or sizes, opts.conns or conns
    depths, classes = opts.depth or depths, opts.classes or classes
    print(f"# server_bench: {SECONDS:.1f} s per cell, {GEN_PROCS} generator processes, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print("# rd = reserve+delete; jobs/s; srv% / gen% = CPU of one core; cpu/job = server CPU us per job")
    cells = [] if opts.no_startup else [
        (empty_dir, kind) for empty_dir, kind in itertools.product((False, True), ("stalkd", "beanstalkd", "floor"))
        if not (empty_dir and kind == "floor")]
    firsts: dict[tuple[str, bool], float] = {}
    for empty_dir, kind in cells:
        ms_listen, ms_first, ms_cpu = startup(kind, empty_dir=empty_dir)
        firsts[kind, empty_dir] = ms_first
        where = "empty dir" if empty_dir else "memory"
        print(f"# start-up {kind:10} {where:9}: exec -> accepting {ms_listen:6.1f} ms, "
              f"exec -> first reply {ms_first:6.1f} ms, CPU to it {ms_cpu:6.1f} ms (median of 7)", flush=True)
    if cells:
        print(startup_verdict(firsts), flush=True)
    if opts.startup_only:
        for label, (ms_wall, ms_cpu) in import_floor().items():
            print(f"# floor {label:34}: {ms_wall:6.1f} ms, CPU {ms_cpu:6.1f} ms (median of 7)")
        ms_asyncio, ms_memory, ms_durable = import_split()
        print(f"# imports in one process (median of 7): asyncio+uvloop {ms_asyncio:.1f} ms, then stalkd's "
              f"in memory {ms_memory:.1f} ms, then a data directory's {ms_durable:.1f} ms")
        floor = firsts.get(("floor", False))
        if floor is not None:
            print(f"# the floor's first reply plus stalkd's imports alone: {floor + ms_memory:.1f} ms in memory, "
                  f"{floor + ms_memory + ms_durable:.1f} ms with a data directory (target "
                  f"{FIRST_REPLY_TARGET_MS:.0f} ms)")
        return 0
    from stalkd.protocol import accel

    pure = not opts.no_pure and accel.IMPLEMENTATION == "c"
    floor = not opts.no_floor
    print(f"# stalkd's hot path: {accel.IMPLEMENTATION}"
          + ("; stalkd-py: the same tree with STALKD_NO_EXTENSIONS=1" if pure else ""))
    if floor:
        print("# floor: bench/floor_server.py (memory: a queue of bodies; never: writes each put and delete;"
              " always: writes and fdatasyncs each); st/fl = stalkd/floor")
    kinds = ["stalkd"] + (["stalkd-py"] if pure else []) + ["beanstalkd"] + (["floor"] if floor else [])
    summary: dict[str, list[float]] = {}
    rows: list[targets.Row] = []
    for klass in classes:
        print()
        print(_header(pure, floor))
        servers = {kind: start(kind, klass) for kind in kinds}
        try:
            for work, size, n, depth in itertools.product(works, sizes, conns, depths):
                med, paired = _cell(servers, kinds, work, size, n, depth)
                row = targets.Row(targets.Cell(klass, work, size, n, depth), med["stalkd"],
                                  med["beanstalkd"], med.get("floor"), paired)
                rows.append(row)
                summary.setdefault(klass, []).append(row.ratio)
                if pure:
                    summary.setdefault(klass + " py", []).append(_ratio(med["stalkd-py"].rate, row.peer.rate))
                print(_line(row, med.get("stalkd-py"), floor), flush=True)
                if opts.split and depth == 1:
                    print(_split_line(servers, kinds, work, size, n), flush=True)
            for kind, srv in () if opts.no_latency else servers.items():
                if kind == "floor":
                    continue  # its reserve never blocks: a put -> waiting reserve has no meaning there
                p50, p99 = latency(srv)
                print(f"{klass:6} latency put->reserve {kind:10}: p50 {p50:7.3f} ms  p99 {p99:7.3f} ms")
        finally:
            for srv in servers.values():
                srv.stop()
    print()
    for klass, ratios in summary.items():
        print(f"{klass:9}: ratio stalkd/beanstalkd geometric mean {statistics.geometric_mean(ratios):.2f}x, "
              f"min {min(ratios):.2f}x, max {max(ratios):.2f}x over {len(ratios)} cells")
    print()
    if PEER_SRC is not None:
        print("targets (issue 12): not judged: with --peer-src the beanstalkd column is another stalkd")
    else:
        print("\n".join(targets.judge(rows, GEN_PROCS, os.cpu_count() or 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
