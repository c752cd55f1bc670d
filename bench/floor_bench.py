"""The ceiling for a Python server: a trivial uvloop server vs stalkd vs beanstalkd, same run.

The "floor" server (bench/floor_server.py) parses only what a put, a reserve and a delete need
and keeps the jobs in a queue per tube: no engine, no records, no stats. Whatever it cannot reach, no Python server on uvloop reaches on this machine
either, so its ratio to beanstalkd is the bound for stalkd's in-memory cells, and the gap
between stalkd and the floor is stalkd's own per-command cost (parser, engine, server glue).

``stalkd-py`` is the same stalkd on its pure-Python modules (``STALKD_NO_EXTENSIONS=1``), next
to the default one with the C accelerator, so the accelerator's share of the gap shows.

Run: ``.venv/bin/python bench/floor_bench.py`` (about 40 s; BENCH_SECONDS, BENCH_ROUNDS as
for server_bench.py). ``bench/floor_server.py`` runs only the trivial server.

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

``--counts`` counts instead of timing (bench/counts.py says how): per job, in the server
process, the instructions executed (valgrind's callgrind), the system calls by name (strace)
and, for the servers in Python, the function calls (sys.setprofile), for stalkd, stalkd-py,
the floor (its durable variant in never/always: a write per put and delete) and beanstalkd, with the ratios
stalkd/floor and stalkd/beanstalkd per cell. Cells: memory put and reserve+delete at 1 and 16
connections, never and always put and reserve+delete at 1, and memory wake at 1 (a worker waiting
in reserve, woken by a producer's put, then deleting); all at depth 1, 100 B. Each figure is
the difference of two runs (``--jobs SMALL LARGE``, default 200 1000) over the extra jobs, so
start-up and per-run set-up cancel. About 15 minutes on 2 busy cores with the defaults;
progress goes to stderr; ``--cell``, ``--server``, ``--meter`` pick a subset, ``--json FILE``
keeps the numbers, ``--functions`` lists the functions behind the Python calls, ``--peer-src DIR``
adds a column for the stalkd of another source tree (before/after in one run). valgrind and
strace come from scripts/system-deps.sh.
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import statistics
import sys
import tempfile
from dataclasses import dataclass

import counts as counts_mod
import server_bench as sb


def _start_floor(sync_dir: str | None = None, sleep_ms: float = 0.0, unwritten: bool = False) -> sb.Server:
    """The floor in memory, or durable in ``sync_dir`` (fdatasync per put, or a sleep as a control)."""
    klass = "memory" if sync_dir is None else "always"
    extra = ([] if sync_dir is None else ["--sleep-ms", str(sleep_ms)]) + (["--unwritten"] if unwritten else [])
    args, env = sb.command("floor", klass, sync_dir, tuple(extra))
    return sb.launch("floor", args, klass, sync_dir, env, stdout=None, stderr=None)


# stalkd `always` with every fdatasync of its log replaced by a sleep: the blocking control.
# Through the file-system seam, not by patching SegmentWriter (a compiled class's methods cannot
# be replaced): stalkd.persist.wal, imported only once serve opens the data directory, takes
# the replaced REAL as Wal.open's default, and passes it down to the log.
_SLEEPING_STALKD = """
import sys, time
import stalkd.log.fs as fs
class _Sleeping(fs.FileSystem):
    def fdatasync(self, fd):
        time.sleep({sleep})
fs.REAL = _Sleeping()
from stalkd.node.cli import main
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
        data = tempfile.mkdtemp(prefix="bench-stalkd-", dir=sb.DATA_DIR)
        code = _SLEEPING_STALKD.format(sleep=sleep_ms / 1000)
        srv = sb.launch(kind, [sys.executable, "-c", code, "-l", "127.0.0.1", "-p", "0", "-b", data,
                               "--log-level", "warning"], "always", data, stderr=None)
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


def _options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="modes: timed put cells (the default), --durable (the fsync-bound cell), --counts\n"
               "(per-job counts); the floor server alone: bench/floor_server.py")
    ap.add_argument("--durable", action="store_true", help="the fsync-bound cell: server CPU per job, same run")
    ap.add_argument("--sleep-ms", type=float, default=2.0,
                    help="with --durable: how long the sleep controls block per job (default 2)")
    counts = ap.add_argument_group("--counts", "instructions, system calls and Python calls per job, by\n"
                                   "difference of two run sizes (needs valgrind and strace)")
    counts.add_argument("--counts", action="store_true", help="count per job instead of timing")
    counts.add_argument("--jobs", type=int, nargs=2, metavar=("SMALL", "LARGE"), default=[200, 1000],
                        help="jobs in the two runs of each cell (default 200 1000)")
    counts.add_argument("--cell", action="append", type=counts_mod.parse_cell, metavar="CLASS:WORK:CONNS",
                        help="only this cell (repeatable): " + ", ".join(c.name for c in counts_mod.CELLS))
    counts.add_argument("--server", action="append", choices=counts_mod.KINDS,
                        help="only this server (repeatable; default all)")
    counts.add_argument("--meter", action="append", choices=counts_mod.METERS,
                        help="only this meter (repeatable; default all)")
    counts.add_argument("--json", metavar="FILE", help="also write the per-job counts to FILE")
    counts.add_argument("--peer-src", metavar="DIR",
                        help="also count the stalkd in this src/ directory (column 'peer'; build its "
                             "extensions there first: setup.py build_ext --inplace), e.g. main's, "
                             "for a before/after in one run")
    counts.add_argument("--functions", action="store_true",
                        help="also list the Python and C functions the Python servers call per job")
    return ap.parse_args()


def main() -> int:
    args = _options()
    signal.signal(signal.SIGTERM, sb._interrupt)
    if args.counts:
        if args.peer_src:
            counts_mod.PEER_SRC = os.path.abspath(args.peer_src)
        kinds = args.server or [k for k in counts_mod.KINDS if k != "peer" or args.peer_src]
        return counts_mod.main(args.meter or list(counts_mod.METERS), kinds,
                               args.cell or list(counts_mod.CELLS), *args.jobs, args.json,
                               args.functions)
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
