"""Loop stalls: the longest wait another connection sees while one command or background step
works on many jobs, stalkd next to Debian's beanstalkd doing the same (issue 11 item 4).

Scenarios (N jobs, default 100,000; ``--jobs``):
  kick-delayed   ``kick N`` on a tube of N delayed jobs
  kick-buried    ``kick N`` on a tube of N buried jobs (each put, reserved and buried first)
  list-tubes     ``list-tubes`` with N/10 tubes (each kept alive by one watching connection)
  delay-expiry   N jobs put with the same 3 s delay, all becoming ready at one instant
  disconnect     a client holding N reserved jobs hangs up (they all go back to ready); the
                 time is until another connection's stats-tube shows none reserved
  snapshot       (durable class only) a snapshot/compaction pass over N live jobs: N puts with
                 ``-b``, then the maintenance timer runs while the probe measures
  ship           (durable ``always``, issue 16) segments shipped while puts go on: a producer
                 pipelines 1 KiB puts for ``--ship-seconds`` into 1 MiB segments (``-s``), the
                 server ships each sealed one to ``--archive-url`` (default a local directory);
                 the probe's command is a ``put`` (the wait a producer sees). The peer column
                 is the same stalkd without ``--archive``, so the difference is the shipping

While the scenario's command runs on one connection, a probe connection sends ``peek 0`` in a
loop (one in flight) and records each round trip; the figure is the longest round trip, in ms,
and the median for scale. Target (issue 11): <= 50 ms, and never longer than beanstalkd's.

Floods (issue 30, ``--floods``; see bench/floods.py): readers-flood, readers-squeeze, big-puts,
handshake-flood and admin-100k print the probe's p99 and max round trip, the longest loop turn
(CPU ms) and the server's RSS before, at peak and after the clients left, for stalkd and the
peer column (``--peer-src``).

Run: ``.venv/bin/python bench/stall_bench.py [--jobs 100000] [--scenario kick-delayed]
[--class memory|never] [--peer-src DIR]`` (``--peer-src`` puts another stalkd tree in the peer
column, e.g. main's code, for an A/B of a change). Figures vary with load; compare within a run.

``--steps`` measures the engine alone, in process: the longest single engine step (apply or
tick) in CPU time of the thread, and how many steps the work took, for the scenarios that are
engine steps (kicks, delays and TTRs ending at one instant). CPU time is what a step costs the
loop whatever else runs on the machine, so this A/B (with ``--peer-src``, the peer tree in a
child process) holds on a loaded machine where the probe's wall-clock maxima mostly measure
the scheduler.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import floods  # noqa: E402  (issue 30's floods)
import server_bench  # noqa: E402  (start/stop of both servers, same flags as the throughput bench)

SCENARIOS = ("kick-delayed", "kick-buried", "list-tubes", "delay-expiry", "disconnect", "snapshot", "ship")


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _drain(s: socket.socket, lines: int, buf: bytearray) -> bytearray:
    """Read until ``lines`` CRLF-terminated reply lines arrived (bodies counted as lines)."""
    while buf.count(b"\r\n") < lines:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise RuntimeError("server closed the connection")
        buf += chunk
    return buf


def _pipeline(s: socket.socket, cmds: list[bytes], reply_lines: int, batch: int = 2000) -> None:
    for i in range(0, len(cmds), batch):
        part = cmds[i : i + batch]
        s.sendall(b"".join(part))
        _drain(s, reply_lines * len(part), bytearray())


def _whole_reply(s: socket.socket) -> bytes:
    """One reply, its body (``OK <bytes>``) included."""
    buf = _drain(s, 1, bytearray())
    head = bytes(buf.split(b"\r\n", 1)[0])
    if head.startswith(b"OK "):
        size = int(head.split()[1])
        while len(buf) < len(head) + 2 + size + 2:
            buf += s.recv(1 << 20)
    return bytes(buf)


def _reply(s: socket.socket) -> bytes:
    return _whole_reply(s).split(b"\r\n", 1)[0]


class Probe(threading.Thread):
    """Round trips of ``command`` (``peek 0``: a reply that needs nothing from the disk) on its
    own connection until stopped."""

    def __init__(self, port: int, command: bytes = b"peek 0\r\n") -> None:
        super().__init__(daemon=True)
        self.sock = _connect(port)
        self.command = command
        self.rtts: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        s = self.sock
        while not self.stop.is_set():
            t0 = time.perf_counter()
            s.sendall(self.command)
            _drain(s, 1, bytearray())
            self.rtts.append(time.perf_counter() - t0)


class Producer(threading.Thread):
    """Pipelined 1 KiB puts, 100 in flight, until stopped: WAL segments fill and seal."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = _connect(port)
        self.stop = threading.Event()
        self.puts = 0

    def run(self) -> None:
        batch = b"put 0 0 60 1024\r\n" + b"p" * 1024 + b"\r\n"
        while not self.stop.is_set():
            _pipeline(self.sock, [batch] * 100, 1)
            self.puts += 100


def _run_ship(port: int, seconds: float) -> tuple[float, float, float, float]:
    """(longest put wait ms, p99 ms, median ms, puts/s) while a producer fills segments."""
    producer = Producer(port)
    probe = Probe(port, b"put 0 0 60 1\r\nx\r\n")
    producer.start()
    probe.start()
    t0 = time.perf_counter()
    producer.stop.wait(seconds)
    producer.stop.set()
    probe.stop.set()
    producer.join()
    probe.join()
    took = time.perf_counter() - t0
    producer.sock.close()
    probe.sock.close()
    rtts = sorted(probe.rtts) or [0.0]
    return rtts[-1] * 1e3, rtts[int(0.99 * (len(rtts) - 1))] * 1e3, statistics.median(rtts) * 1e3, producer.puts / took


def ship_row(seconds: float, archive_url: str | None, rounds: int) -> None:
    """The ``ship`` scenario: stalkd with and without --archive, alternating, ``rounds`` each.

    Each run ships to a fresh place: a new directory, or a new prefix under ``archive_url`` (an
    archive left by an earlier run would already cover the new server's offsets, and it would
    ship nothing)."""
    from stalkd.archive.remote import load_manifest
    from stalkd.archive.store import Store

    print(f"# ship: {seconds:.0f} s of pipelined 1 KiB puts into 1 MiB segments, durability always; "
          f"probe = put round trip (ms); peer = the same stalkd without --archive; load {os.getloadavg()[0]:.1f}")
    print(f"{'':<14} {'max':>8} {'p99':>7} {'med':>6} {'puts/s':>8} {'shipped':>8}")
    for r in range(rounds):
        order = [True, False] if r % 2 == 0 else [False, True]
        for ship in order:
            if archive_url is None:
                url = tempfile.mkdtemp(prefix="bench-archive-", dir="/var/tmp")
            else:
                url = f"{archive_url.rstrip('/')}/bench-{os.getpid()}-{r}"
            extra = ("-s", str(2**20)) + (("--archive", url) if ship else ())
            srv = server_bench.start("stalkd", "always", extra)
            try:
                mx, p99, med, rate = _run_ship(srv.port, seconds)
            finally:
                srv.stop()
            shipped = str(len(load_manifest(Store.open(url)).segments)) if ship else "-"
            if archive_url is None:
                shutil.rmtree(url, ignore_errors=True)
            label = "with --archive" if ship else "without"
            print(f"{label:<14} {mx:8.1f} {p99:7.2f} {med:6.2f} {rate:8.0f} {shipped:>8}", flush=True)


def _setup(port: int, scenario: str, n: int) -> list[socket.socket]:
    """State for ``scenario``; returns connections that must stay open."""
    s = _connect(port)
    keep = [s]
    _pipeline(s, [b"use stall\r\n"], 1)
    if scenario == "kick-delayed":
        _pipeline(s, [b"put 0 3600 60 1\r\nx\r\n"] * n, 1)
    elif scenario in ("kick-buried", "disconnect"):
        _pipeline(s, [b"put %d 0 600 1\r\nx\r\n" % (i % 1000) for i in range(n)], 1)
        _pipeline(s, [b"watch stall\r\n", b"ignore default\r\n"], 1)
        for i in range(0, n, 2000):
            k = min(2000, n - i)
            s.sendall(b"reserve-with-timeout 0\r\n" * k)
            buf = _drain(s, 2 * k, bytearray())
            ids = [line.split()[1] for line in bytes(buf).split(b"\r\n") if line.startswith(b"RESERVED")]
            if scenario == "kick-buried":
                _pipeline(s, [b"bury %s 0\r\n" % j for j in ids], 1)
    elif scenario == "list-tubes":
        w = _connect(port)
        keep.append(w)
        _pipeline(w, [b"watch t%07d\r\n" % i for i in range(n // 10)], 1)
    elif scenario == "snapshot":
        _pipeline(s, [b"put 0 0 60 100\r\n" + b"x" * 100 + b"\r\n"] * n, 1)
    elif scenario == "delay-expiry":
        _pipeline(s, [b"put 0 3 60 1\r\nx\r\n"] * n, 1)
    return keep


def _run(port: int, scenario: str, n: int) -> tuple[float, float, float]:
    """(longest probe wait ms, median ms, seconds the scenario's command took)."""
    keep = _setup(port, scenario, n)
    s = keep[0]
    probe = Probe(port)
    probe.start()
    time.sleep(0.2)  # the probe's baseline
    t0 = time.perf_counter()
    if scenario.startswith("kick"):
        s.sendall(b"kick %d\r\n" % n)
        head = _reply(s)
        assert head == b"KICKED %d" % n, head
    elif scenario == "list-tubes":
        s.sendall(b"list-tubes\r\n")
        assert _reply(s).startswith(b"OK ")
    elif scenario == "delay-expiry":
        time.sleep(3.5)  # the delays end meanwhile
    elif scenario == "disconnect":
        s.close()
        keep.remove(s)
        w = _connect(port)
        keep.append(w)
        while True:  # a poll every 5 ms: a few more round trips for the server, next to the probe's
            w.sendall(b"stats-tube stall\r\n")
            if b"current-jobs-reserved: 0\n" in _whole_reply(w):
                break
            time.sleep(0.005)
    else:
        time.sleep(3.0)  # the maintenance timer (every second) snapshots / compacts meanwhile
    took = time.perf_counter() - t0
    time.sleep(0.1)
    probe.stop.set()
    probe.join()
    for c in [*keep, probe.sock]:
        c.close()
    rtts = probe.rtts or [0.0]
    return max(rtts) * 1e3, statistics.median(rtts) * 1e3, took


STEP_SCENARIOS = ("kick-delayed", "kick-buried", "delay-expiry", "ttr-expiry", "disconnect")


def engine_steps(scenario: str, n: int) -> tuple[float, int, float]:
    """(longest step, CPU ms; steps; total CPU s) of ``scenario`` on a bare engine."""
    import gc

    from stalkd.engine import Engine
    from stalkd.protocol import commands as C

    e = Engine(records=False)
    e.connect(1, 0.0)
    now = 1000.0
    e.apply(1, C.Use("stall"), now)
    delay = 3600 if scenario == "kick-delayed" else 3 if scenario == "delay-expiry" else 0
    for _ in range(n):
        e.apply(1, C.Put(0, delay, 1, b"x"), now)
    if scenario in ("kick-buried", "ttr-expiry", "disconnect"):
        e.apply(1, C.Watch("stall"), now)
        for _ in range(n):
            j = e.apply(1, C.Reserve(), now).reply
            if scenario == "kick-buried":
                e.apply(1, C.Bury(j.id, 0), now)  # type: ignore[union-attr]
    gc.collect()
    gc.disable()  # the server keeps no automatic full collection either (gcpolicy.py)
    steps: list[float] = []

    def step(f, *args):  # type: ignore[no-untyped-def]
        t0 = time.thread_time()
        out = f(*args)
        steps.append(time.thread_time() - t0)
        return out

    if scenario.startswith("kick"):
        e.connect(2, now)
        e.apply(2, C.Use("stall"), now)
        out = step(e.apply, 2, C.Kick(n), now)
        while out.reply is None and not out.wakeups:
            out = step(e.tick, now)
    elif scenario == "disconnect":
        out = step(e.disconnect, 1, now)
        while out.next_deadline is not None and out.next_deadline <= now:
            out = step(e.tick, now)
    else:
        now += 5.0
        out = step(e.tick, now)
        while out.next_deadline is not None and out.next_deadline <= now:
            out = step(e.tick, now)
    gc.enable()
    return max(steps) * 1e3, len(steps), sum(steps)


def _steps_main(n: int, peer: str | None) -> None:
    import json
    import subprocess

    print(f"# engine steps, {n} jobs: longest step (thread CPU ms), steps, total CPU s; load "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'scenario':<14} {'this tree':>26}   {'peer tree' if peer else '':>26}")
    for scenario in STEP_SCENARIOS:
        mx, k, total = engine_steps(scenario, n)
        row = f"{mx:8.2f} ms {k:6d} {total:6.2f} s"
        if peer:
            out = subprocess.run([sys.executable, __file__, "--steps-child", scenario, "--jobs", str(n)],
                                 env={**os.environ, "PYTHONPATH": peer}, check=True,
                                 capture_output=True, text=True).stdout
            pm, pk, pt = json.loads(out)
            row += f"   {pm:8.2f} ms {pk:6d} {pt:6.2f} s"
        print(f"{scenario:<14} {row}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    ap.add_argument("--class", dest="klass", default="memory", choices=["memory", "never"])
    ap.add_argument("--peer-src", help="another stalkd source tree in place of beanstalkd")
    ap.add_argument("--steps", action="store_true", help="engine steps in process (CPU time), see above")
    ap.add_argument("--steps-child", help=argparse.SUPPRESS)
    ap.add_argument("--ship-seconds", type=float, default=5.0, help="ship: seconds of puts per run")
    ap.add_argument("--ship-rounds", type=int, default=2, help="ship: alternating rounds")
    ap.add_argument("--archive-url", help="ship: where to ship, a fresh prefix under it per run "
                    "(default a fresh local directory per run)")
    ap.add_argument("--floods", action="append", nargs="?", const="all",
                    choices=[*floods.FLOODS, "all"], help="issue 30's floods (all, or one; repeatable)")
    ap.add_argument("--admin-tubes", type=int, default=100_000, help="admin-100k: tubes")
    ap.add_argument("--admin-jobs", type=int, default=1_000_000, help="admin-100k: jobs in all")
    args = ap.parse_args()
    if args.floods:
        server_bench.PEER_SRC = args.peer_src and os.path.abspath(args.peer_src)
        cases = list(floods.FLOODS) if "all" in args.floods else args.floods
        floods.main_rows(cases, server_bench.PEER_SRC, Probe, args.admin_tubes, args.admin_jobs)
        return
    if args.steps_child:
        import json

        print(json.dumps(engine_steps(args.steps_child, args.jobs)))
        return
    if args.steps:
        _steps_main(args.jobs, args.peer_src and os.path.abspath(args.peer_src))
        return
    server_bench.PEER_SRC = args.peer_src
    peer = "stalkd(peer)" if args.peer_src else "beanstalkd"
    print(f"# {args.jobs} jobs, class {args.klass}; longest / median probe round trip, ms")
    print(f"{'scenario':<14} {'stalkd max':>10} {'med':>6} {'took s':>7}   {peer + ' max':>18} {'med':>6} {'took s':>7}")
    for scenario in args.scenario or SCENARIOS:
        if scenario == "ship":
            ship_row(args.ship_seconds, args.archive_url, args.ship_rounds)
            continue
        klass = "never" if scenario == "snapshot" else args.klass
        row = []
        for kind in ("stalkd", "beanstalkd"):
            if scenario == "snapshot" and kind == "beanstalkd" and not args.peer_src:
                row.append("      (no snapshots)")
                continue
            srv = server_bench.start(kind, klass)
            try:
                mx, med, took = _run(srv.port, scenario, args.jobs)
            finally:
                srv.stop()
            row.append(f"{mx:10.1f} {med:6.2f} {took:7.2f}")
        print(f"{scenario:<14} {row[0]}   {row[1]:>30}", flush=True)


if __name__ == "__main__":
    main()
