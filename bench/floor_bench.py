"""The ceiling for a Python server: a trivial uvloop server vs stalkd vs beanstalkd, same run.

The "floor" server parses only what a put needs and answers ``INSERTED n``: no engine, no
records, no stats. Whatever it cannot reach, no Python server on uvloop reaches on this machine
either, so its ratio to beanstalkd is the bound for stalkd's in-memory put cells, and the gap
between stalkd and the floor is stalkd's own per-command cost (parser, engine, server glue).

``stalkd-py`` is the same stalkd on its pure-Python modules (``STALKD_NO_EXTENSIONS=1``), next
to the default one with the C accelerator, so the accelerator's share of the gap shows.

Run: ``.venv/bin/python bench/floor_bench.py`` (about 40 s; BENCH_SECONDS, BENCH_ROUNDS as
for server_bench.py). ``--serve PORT`` runs only the trivial server.

``--durable`` measures the fsync-bound cell instead (put 100 B, 1 connection, depth 1): server
CPU per job of beanstalkd ``-f 0``, the fsync floor (the trivial server writing each put into a
preallocated file and fdatasyncing it before INSERTED; its file is zero-filled, as beanstalkd's
binlog is, and ``floor unwritten`` is the same server on a file only ``posix_fallocate``'d, whose
unwritten extents make an fdatasync wait for a journal commit whenever a write reaches a new
block), stalkd ``always`` and ``never``, and two
controls that block as long without any I/O: the floor and stalkd ``always`` with the fdatasync
replaced by a ``--sleep-ms`` sleep. CPU is read from /proc/PID/task/*/schedstat (nanoseconds).
Whatever a control costs beyond its non-blocking counterpart is the price of being descheduled
and resumed per job (caches refilled), not of the fsync's work.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import server_bench as sb


class _Floor(asyncio.Protocol):
    """put -> INSERTED n; use/watch/other lines get a fixed short reply."""

    durable = False  # the durable floor stores each put before replying (one loop for both)

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.n = 0

    def store(self, record: bytes) -> None:
        pass

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        out = []
        pos = 0
        while True:
            i = buf.find(b"\r\n", pos)
            if i < 0:
                break
            line = buf[pos:i]
            if line.startswith(b"put "):
                end = i + 2 + int(line.rsplit(b" ", 1)[1]) + 2
                if len(buf) < end:
                    break
                if self.durable:
                    self.store(buf[pos:end])
                pos = end
                self.n += 1
                out.append(b"INSERTED %d\r\n" % self.n)
            else:
                pos = i + 2
                out.append(b"USING x\r\n" if line.startswith(b"use ") else b"WATCHING 2\r\n")
        self.buf = buf[pos:]
        if out and self.transport is not None:
            self.transport.writelines(out)


class _FloorSync(_Floor):
    """The floor, durable: each put's bytes go into a preallocated file (pwrite), then
    fdatasync (or, as a control, a sleep) before its INSERTED; what beanstalkd -f 0 does."""

    durable = True
    fd = -1
    pos = 0
    sleep = 0.0

    def store(self, record: bytes) -> None:
        cls = _FloorSync
        if cls.pos + len(record) > _FLOOR_FILE:
            cls.pos = 0
        cls.pos += os.pwrite(cls.fd, record, cls.pos)
        if cls.sleep:
            time.sleep(cls.sleep)
        else:
            os.fdatasync(cls.fd)


_FLOOR_FILE = 64 << 20


async def _serve(port: int, proto: type[_Floor]) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_server(proto, "127.0.0.1", port)
    await asyncio.Event().wait()


def _start_floor(sync_dir: str | None = None, sleep_ms: float = 0.0, unwritten: bool = False) -> sb.Server:
    port = sb._free_port()
    extra = [] if sync_dir is None else ["--sync-dir", sync_dir, "--sleep-ms", str(sleep_ms)]
    extra += ["--unwritten"] if unwritten else []
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), *extra])
    sb._wait_port(port, proc)
    return sb.Server("floor", proc, port, sync_dir, "memory" if sync_dir is None else "always")


# stalkd `always` with every fdatasync of its log replaced by a sleep: the blocking control.
_SLEEPING_STALKD = """
import sys, time
from stalkd.log.writer import SegmentWriter
SegmentWriter.fdatasync = lambda self, fd: time.sleep({sleep})
from stalkd.server.cli import main
sys.argv[0] = "stalkd"
sys.exit(main())
"""


@dataclass
class _Precise(sb.Server):
    """CPU of every thread, from schedstat (ns): /proc/PID/stat ticks are too coarse for a
    cell that runs a few hundred jobs per second."""

    def cpu_seconds(self) -> float:
        total = 0
        for path in glob.glob(f"/proc/{self.proc.pid}/task/*/schedstat"):
            try:
                with open(path) as f:
                    total += int(f.read().split()[0])
            except OSError:  # a thread that just ended
                pass
        return total / 1e9


def _start_durable(kind: str, sleep_ms: float) -> sb.Server:
    if kind == "beanstalkd":
        srv = sb.start("beanstalkd", "always")
    elif kind == "stalkd never":
        srv = sb.start("stalkd", "never")
    elif kind == "stalkd always":
        srv = sb.start("stalkd", "always")
    elif kind in ("floor fsync", "floor unwritten"):
        srv = _start_floor(tempfile.mkdtemp(prefix="bench-floor-", dir=sb.DATA_DIR), unwritten=kind == "floor unwritten")
    elif kind == "floor sleep":
        srv = _start_floor(tempfile.mkdtemp(prefix="bench-floor-", dir=sb.DATA_DIR), sleep_ms)
    else:  # stalkd always, fdatasync -> sleep
        port = sb._free_port()
        data = tempfile.mkdtemp(prefix="bench-stalkd-", dir=sb.DATA_DIR)
        code = _SLEEPING_STALKD.format(sleep=sleep_ms / 1000)
        proc = subprocess.Popen([sys.executable, "-c", code, "-l", "127.0.0.1", "-p", str(port), "-b", data,
                                 "--log-level", "warning"], stdout=subprocess.DEVNULL)
        sb._wait_port(port, proc)
        srv = sb.Server(kind, proc, port, data, "always")
    return _Precise(kind, srv.proc, srv.port, srv.data_dir, srv.durability)


def durable(sleep_ms: float) -> int:
    """The fsync-bound cell: put 100 B, 1 conn, depth 1; server CPU us per job, same run."""
    kinds = ["beanstalkd", "floor fsync", "floor unwritten", "floor sleep", "stalkd always", "stalkd sleep", "stalkd never"]
    servers = {k: _start_durable(k, sleep_ms) for k in kinds}
    print(f"# floor_bench --durable: put 100 B, 1 conn, depth 1, {sb.SECONDS} s per run, {sb.ROUNDS} rounds "
          f"alternating, medians; sleep controls block {sleep_ms} ms per job; load {os.getloadavg()[0]:.1f}")
    print(f"{'server':16} {'jobs/s':>8} {'cpu us/job':>10}   runs (us/job)")
    try:
        cpu: dict[str, list[float]] = {k: [] for k in kinds}
        rate: dict[str, list[float]] = {k: [] for k in kinds}
        for r in range(sb.ROUNDS):
            for k in kinds if r % 2 == 0 else kinds[::-1]:
                jobs, srv_pct, _ = sb.run_cell(servers[k], "put", 100, 1, 1)
                rate[k].append(jobs)
                cpu[k].append(1e4 * srv_pct / jobs)
        for k in kinds:
            print(f"{k:16} {statistics.median(rate[k]):8.0f} {statistics.median(cpu[k]):10.1f}   "
                  + " ".join(f"{x:.0f}" for x in cpu[k]))
        med = {k: statistics.median(cpu[k]) for k in kinds}
        print(f"stalkd always - never: {med['stalkd always'] - med['stalkd never']:.0f} us/job; "
              f"stalkd sleep - never: {med['stalkd sleep'] - med['stalkd never']:.0f} us/job "
              f"(blocking alone); stalkd/beanstalkd {med['stalkd always'] / med['beanstalkd']:.2f}x, "
              f"floor fsync/beanstalkd {med['floor fsync'] / med['beanstalkd']:.2f}x")
        print("jobs/s ratios to beanstalkd: " + ", ".join(
            f"{k} {statistics.median(rate[k]) / statistics.median(rate['beanstalkd']):.2f}x" for k in kinds[1:]))
    finally:
        for srv in servers.values():
            srv.stop()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", type=int, metavar="PORT", help="run only the trivial server")
    ap.add_argument("--sync-dir", help="with --serve: durable floor writing into DIR")
    ap.add_argument("--sleep-ms", type=float, default=2.0,
                    help="block this long instead of fdatasync (the durable floor with --serve, "
                         "the sleep controls with --durable; default 2)")
    ap.add_argument("--unwritten", action="store_true",
                    help="with --sync-dir: only posix_fallocate the file (no zeros written over it)")
    ap.add_argument("--durable", action="store_true", help="the fsync-bound cell (see above)")
    args = ap.parse_args()
    if args.serve:
        import uvloop

        proto: type[_Floor] = _Floor
        if args.sync_dir:
            proto = _FloorSync
            _FloorSync.fd = os.open(os.path.join(args.sync_dir, "log"), os.O_RDWR | os.O_CREAT, 0o600)
            os.posix_fallocate(_FloorSync.fd, 0, _FLOOR_FILE)
            if not args.unwritten:  # zeros over the whole file, as beanstalkd writes its binlog
                for at in range(0, _FLOOR_FILE, 1 << 20):
                    os.pwrite(_FloorSync.fd, bytes(1 << 20), at)
                os.fsync(_FloorSync.fd)
            _FloorSync.sleep = args.sleep_ms / 1000
        uvloop.run(_serve(args.serve, proto))
        return 0
    if args.durable:
        return durable(args.sleep_ms)
    from stalkd.protocol import accel

    # stalkd-py: the same tree on its pure-Python modules (STALKD_NO_EXTENSIONS=1), same run
    servers = {"floor": _start_floor(), "stalkd": sb.start("stalkd", "memory"),
               "stalkd-py": sb.start("stalkd-py", "memory"), "beanstalkd": sb.start("beanstalkd", "memory")}
    print(f"# floor_bench: put 100 B in memory, {sb.SECONDS} s per run, {sb.ROUNDS} rounds, "
          f"medians; us = server CPU per job; stalkd's hot path: {accel.IMPLEMENTATION}, "
          f"stalkd-py: pure Python; load {os.getloadavg()[0]:.1f}")
    print(f"{'conns':>5} {'depth':>5} | {'floor/s':>8} {'us':>5} | {'stalkd/s':>8} {'us':>5} | "
          f"{'stalkd-py/s':>11} {'us':>5} | {'beanstalkd/s':>12} {'us':>5} | "
          f"floor/bs stalkd/bs stalkd/floor py/floor")
    try:
        for conns, depth in [(1, 1), (16, 1), (1, 64), (16, 64)]:
            rates: dict[str, list[float]] = {k: [] for k in servers}
            cpus: dict[str, list[float]] = {k: [] for k in servers}
            for r in range(sb.ROUNDS):
                order = list(servers) if r % 2 == 0 else list(reversed(servers))
                for k in order:
                    jobs, srv_pct, _ = sb.run_cell(servers[k], "put", 100, conns, depth)
                    rates[k].append(jobs)
                    cpus[k].append(1e4 * srv_pct / jobs)
            f, s, p, b = (statistics.median(rates[k]) for k in ("floor", "stalkd", "stalkd-py", "beanstalkd"))
            fu, su, pu, bu = (statistics.median(cpus[k]) for k in ("floor", "stalkd", "stalkd-py", "beanstalkd"))
            print(f"{conns:>5} {depth:>5} | {f:8.0f} {fu:5.1f} | {s:8.0f} {su:5.1f} | {p:11.0f} {pu:5.1f} | "
                  f"{b:12.0f} {bu:5.1f} | {f / b:7.2f}x {s / b:8.2f}x {s / f:11.2f}x {p / f:7.2f}x", flush=True)
    finally:
        for srv in servers.values():
            srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
