"""stalkd vs Debian's beanstalkd, same machine, same run, alternating: throughput ratios per cell.

Matrix (issue 4): workload {put, reserve+delete} x body {100 B, 4 KiB} x connections {1, 16}
x pipeline depth {1, 64}, in three durability classes:
  always  stalkd --dir (fsync before every acknowledgement)  vs  beanstalkd -b -f 0
  never   stalkd --dir -F                                     vs  beanstalkd -b -F
  memory  stalkd (no dir)                                     vs  beanstalkd (no -b)
plus end-to-end put -> reserve latency (p50/p99) and server CPU microseconds per job.

The load generator is Python: ``GEN_PROCS`` processes, each driving its share of the
connections over raw non-blocking sockets with pipelining. To show it is not the bottleneck,
every cell prints the server's CPU use (from /proc, % of one core) next to the generator's:
a server near 100 % is saturated; a generator near 100 % x GEN_PROCS with an idle server
means the number says more about Python than about the server.

Each cell runs ROUNDS times, stalkd and beanstalkd alternating (who goes first alternates too),
and the medians are printed: the machine this was written on is shared and noisy.

Run: ``.venv/bin/python bench/server_bench.py`` (env: BENCH_SECONDS per run, default 0.5;
BENCH_ROUNDS, default 3; BENCH_CLASSES=always,never,memory; BENCH_QUICK=1 for a 4-cell smoke
run; GEN_PROCS=2; BENCH_DATA_DIR, default /var/tmp, holds the servers' data directories; BENCH_SERVER_LOG=FILE keeps the servers' stderr, and with BENCH_LOG_LEVEL=info
stalkd's stop line reports records per fsync). A subset while iterating, e.g.
``bench/server_bench.py --class memory --work put --size 100 --conns 1 --depth 1 --no-latency``
(each option may be repeated). ``--peer-src DIR`` replaces beanstalkd by the stalkd of another
source tree (say a ``git worktree`` of the last commit): an A/B run of a change, same alternation.
``--tls`` runs the TLS listener against the plain one instead (tls_bench.py).

stalkd runs twice per cell when its C accelerator is built: ``stalkd`` (the default, with it)
and ``stalkd-py`` (``STALKD_NO_EXTENSIONS=1``, the pure-Python modules), in the same
alternation, so each line shows both against beanstalkd and ``C/py``; ``--no-pure`` skips the
second one.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

SECONDS = float(os.environ.get("BENCH_SECONDS", "0.5"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))  # alternating rounds per cell; medians reported
GEN_PROCS = int(os.environ.get("GEN_PROCS", "2"))
CLASSES = os.environ.get("BENCH_CLASSES", "always,never,memory").split(",")
QUICK = os.environ.get("BENCH_QUICK") == "1"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from support import listening_ports, wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)

STALKD = [sys.executable, "-m", "stalkd.server.cli"]
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
    ``extra`` flags go to stalkd only."""
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
    """A server of ``kind`` in durability ``klass``; ``extra`` flags go to stalkd only."""
    data_dir = tempfile.mkdtemp(prefix=f"bench-{kind}-", dir=DATA_DIR) if klass != "memory" else None
    args, env = command(kind, klass, data_dir, extra)
    return launch(kind, args, klass, data_dir, env)


# --- load generator (runs in child processes) -----------------------------------------------


class _Conn:
    """One pipelined connection's state machine: send a batch, count its replies."""

    def __init__(self, port: int, tube: bytes, body: bytes, depth: int, work: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sync(b"use %s\r\nwatch %s\r\nignore default\r\n" % (tube, tube), 3)
        self.sock.setblocking(False)
        self.depth = depth
        self.work = work
        self.put_batch = b"put 0 0 120 %d\r\n%s\r\n" % (len(body), body) * depth
        self.res_batch = b"reserve-with-timeout 0\r\n" * depth
        self.buf = bytearray()
        self.pending = 0  # replies still expected
        self.phase = ""
        self.ids: list[bytes] = []
        self.done = 0
        self.out = b""
        self.exhausted = False

    def _sync(self, data: bytes, replies: int) -> None:
        self.sock.sendall(data)
        got = b""
        while got.count(b"\r\n") < replies:
            got += self.sock.recv(65536)

    def begin(self) -> None:
        if self.work == "put":
            self.phase, self.out, self.pending = "put", self.put_batch, self.depth
        else:
            self.phase, self.out, self.pending = "res", self.res_batch, self.depth

    def flush(self) -> None:
        while self.out:
            try:
                n = self.sock.send(self.out)
            except BlockingIOError:
                return
            self.out = self.out[n:]

    def readable(self) -> bool:
        """Consume replies; True when the batch is complete."""
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk
        if self.phase in ("put", "del"):
            n = self.buf.count(b"\r\n")
            self.pending -= n
            if n:
                del self.buf[: self.buf.rfind(b"\r\n") + 2]
            if self.pending == 0:
                if self.phase == "put":
                    self.done += self.depth
                else:
                    self.done += len(self.ids)
                return True
            return False
        # reserve phase: RESERVED <id> <bytes>\r\n<body>\r\n or TIMED_OUT\r\n
        buf = self.buf
        pos = 0
        while self.pending:
            i = buf.find(b"\r\n", pos)
            if i < 0:
                break
            line = bytes(buf[pos:i])
            if line.startswith(b"RESERVED"):
                _, jid, size = line.split()
                end = i + 2 + int(size) + 2
                if end > len(buf):
                    break
                self.ids.append(jid)
                pos = end
            else:
                pos = i + 2
            self.pending -= 1
        del buf[:pos]
        if self.pending:
            return False
        if not self.ids:
            self.exhausted = True  # the preloaded jobs are used up: this connection is done
            return True
        self.phase = "del"
        self.out = b"".join(b"delete %s\r\n" % j for j in self.ids)
        self.pending = len(self.ids)
        return False


def _generate(port: int, tubes: list[bytes], body: bytes, depth: int, work: str,
              t_start: float, t_end: float, q: mp.Queue[tuple[int, float, float]]) -> None:
    conns = [_Conn(port, t, body, depth, work) for t in tubes]
    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c.sock, selectors.EVENT_READ, c)
    while time.time() < t_start:
        time.sleep(0.001)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    rw = selectors.EVENT_READ | selectors.EVENT_WRITE

    def push(c: _Conn) -> None:
        # Write what the socket takes; ask for writability only while something is left.
        c.flush()
        sel.modify(c.sock, rw if c.out else selectors.EVENT_READ, c)

    for c in conns:
        c.begin()
        push(c)
    active = len(conns)
    last = time.time()
    while active:
        for key, mask in sel.select(1.0):
            c = key.data
            if mask & selectors.EVENT_WRITE:
                push(c)
            if not mask & selectors.EVENT_READ:
                continue
            if c.readable():
                last = time.time()
                if last < t_end and not c.exhausted:
                    c.ids = []
                    c.begin()
                    push(c)
                else:
                    active -= 1
                    sel.unregister(c.sock)
            elif c.out:
                push(c)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    q.put((sum(c.done for c in conns), cpu, last))


def _preload(port: int, tubes: list[bytes], body: bytes, per_tube: int) -> None:
    """Put ``per_tube`` jobs into each tube (not timed), pipelined in chunks."""
    for t in tubes:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"use %s\r\n" % t)
            left = per_tube
            got = b""
            expect = 1
            while left:
                n = min(left, 512)
                s.sendall(b"put 0 0 120 %d\r\n%s\r\n" % (len(body), body) * n)
                left -= n
                expect += n
            while got.count(b"\r\n") < expect:
                got += s.recv(1 << 20)


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
        _preload(srv.port, tubes, body, max(64, stock // n_conns))
    procs = max(1, min(GEN_PROCS, n_conns))
    q: mp.Queue[tuple[int, float, float]] = mp.Queue()
    t_start = time.time() + 0.3
    t_end = t_start + SECONDS
    children = []
    for k in range(procs):
        share = tubes[k::procs]
        p = mp.Process(target=_generate, args=(srv.port, share, body, depth, work, t_start, t_end, q))
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


def startup(kind: str, runs: int = 7) -> tuple[float, float]:
    """Median ms from exec to (a) the port listening (seen in /proc), (b) the first reply (in memory)."""
    listen, first = [], []
    for _ in range(runs):
        args = ([*STALKD, "--log-level", "warning"] if kind == "stalkd" else ["beanstalkd"])
        t0 = time.monotonic()
        proc = subprocess.Popen([*args, "-l", "127.0.0.1", "-p", "0"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
        finally:
            proc.terminate()
            proc.wait()
    return statistics.median(listen) * 1000, statistics.median(first) * 1000


# --- the matrix -----------------------------------------------------------------------------


def _median(runs: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """The run with the median throughput (its CPU figures belong to the same run)."""
    return sorted(runs)[len(runs) // 2]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # run the finally blocks: servers stopped, data dirs removed


def _options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--class", dest="classes", action="append", choices=["always", "never", "memory"])
    ap.add_argument("--work", action="append", choices=["put", "rd"])
    ap.add_argument("--size", action="append", type=int)
    ap.add_argument("--conns", action="append", type=int)
    ap.add_argument("--depth", action="append", type=int)
    ap.add_argument("--no-latency", action="store_true", help="skip the put->reserve latency runs")
    ap.add_argument("--no-startup", action="store_true", help="skip the start-up timings")
    ap.add_argument("--peer-src", help="compare with the stalkd in this src/ directory, not beanstalkd")
    ap.add_argument("--tls", action="store_true",
                    help="TLS listener vs plain listener, and beanstalkd behind stunnel (tls_bench.py)")
    ap.add_argument("--no-pure", action="store_true",
                    help="do not also run stalkd on its pure-Python modules (STALKD_NO_EXTENSIONS=1)")
    return ap.parse_args()


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
    for kind in () if opts.no_startup else ("stalkd", "beanstalkd"):
        ms_listen, ms_first = startup(kind)
        print(f"# start-up {kind:10}: exec -> accepting {ms_listen:6.1f} ms, exec -> first reply {ms_first:6.1f} ms (median of 7)")
    from stalkd.protocol import accel

    pure = not opts.no_pure and accel.IMPLEMENTATION == "c"
    print(f"# stalkd's hot path: {accel.IMPLEMENTATION}"
          + ("; stalkd-py: the same tree with STALKD_NO_EXTENSIONS=1" if pure else ""))
    kinds = ("stalkd", "stalkd-py", "beanstalkd") if pure else ("stalkd", "beanstalkd")
    header = (f"{'class':6} {'work':4} {'size':>5} {'conns':>5} {'depth':>5} | "
              f"{'stalkd/s':>9} {'srv%':>4} {'gen%':>4} {'us/job':>6} | "
              + (f"{'stalkd-py/s':>11} {'us/job':>6} | " if pure else "")
              + f"{'beanstalkd/s':>12} {'srv%':>4} {'gen%':>4} {'us/job':>6} | {'ratio':>6}"
              + (f" {'py/bs':>6} {'C/py':>6}" if pure else ""))
    summary: dict[str, list[float]] = {}
    for klass in classes:
        print()
        print(header)
        servers = {kind: start(kind, klass) for kind in kinds}
        try:
            for work in works:
                for size in sizes:
                    for n in conns:
                        for depth in depths:
                            runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
                            for r in range(ROUNDS):
                                order = kinds if r % 2 == 0 else kinds[::-1]
                                for kind in order:  # alternate who goes first
                                    runs[kind].append(run_cell(servers[kind], work, size, n, depth))
                            s, b = _median(runs["stalkd"]), _median(runs["beanstalkd"])
                            ratio = s[0] / b[0] if b[0] else float("inf")
                            summary.setdefault(klass, []).append(ratio)
                            us_s = 1e4 * s[1] / s[0] if s[0] else 0
                            us_b = 1e4 * b[1] / b[0] if b[0] else 0
                            py_cols = py_ratios = ""
                            if pure:
                                p = _median(runs["stalkd-py"])
                                us_p = 1e4 * p[1] / p[0] if p[0] else 0
                                py_cols = f"{p[0]:11.0f} {us_p:6.1f} | "
                                py_ratios = (f" {p[0] / b[0] if b[0] else float('inf'):5.2f}x"
                                             f" {s[0] / p[0] if p[0] else float('inf'):5.2f}x")
                                summary.setdefault(klass + " py", []).append(p[0] / b[0] if b[0] else float("inf"))
                            print(f"{klass:6} {work:4} {size:5} {n:5} {depth:5} | "
                                  f"{s[0]:9.0f} {s[1]:4.0f} {s[2]:4.0f} {us_s:6.1f} | {py_cols}"
                                  f"{b[0]:12.0f} {b[1]:4.0f} {b[2]:4.0f} {us_b:6.1f} | {ratio:6.2f}x{py_ratios}",
                                  flush=True)
            for kind, srv in () if opts.no_latency else servers.items():
                p50, p99 = latency(srv)
                print(f"{klass:6} latency put->reserve {kind:10}: p50 {p50:7.3f} ms  p99 {p99:7.3f} ms")
        finally:
            for srv in servers.values():
                srv.stop()
    print()
    for klass, ratios in summary.items():
        print(f"{klass:9}: ratio stalkd/beanstalkd geometric mean {statistics.geometric_mean(ratios):.2f}x, "
              f"min {min(ratios):.2f}x, max {max(ratios):.2f}x over {len(ratios)} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
