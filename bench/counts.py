"""floor_bench.py --counts: what each server does per job, counted rather than timed.

At depth 1 a timing swings up to 2x between runs of a shared machine; a count does not. For each
cell every server runs the same lockstep load twice, SMALL and LARGE jobs, and each figure is
(count after LARGE - count after SMALL) / (LARGE - SMALL): whatever a run does once (connecting,
choosing tubes, hanging up) cancels, and the server's start-up is never counted. The meters:

  callgrind  instructions executed by the server process in user space, all threads (valgrind
             --tool=callgrind; the counters are dumped with callgrind_control around each run);
             the kernel's work for its system calls is not in them, the strace column is
  strace     system calls of the server process, all threads, by name (strace -f -c, attached
             to the running server for each run only)
  pycalls    Python function calls ("call" events) and calls of C functions from Python
             ("c_call") under sys.setprofile, for the servers written in Python

The load is lockstep (bench/lockstep.py): each round sends one command on every connection, then
reads every reply, so a run does the same work whatever the server's speed (valgrind slows a
server 50-100x). At 16 connections a server's reads and wake-ups depend on how many requests
arrive together, so its syscalls per job there describe this driver as much as the server.
reserve+delete cells preload their jobs before the meter starts, so their figures are the
reserve and the delete only. A wake cell is a worker's life at depth 1 when jobs come one at a
time: each worker connection sends ``reserve`` and waits, a producer connection per worker puts
the job that wakes it, and the worker deletes it (the floor never blocks in reserve: it has no
wake cells). ``peer`` is stalkd from another source tree (``--peer-src``), for a before/after in
one run. What a server does per second rather than per job (a maintenance timer) does not
cancel: under valgrind a run lasts seconds, so LARGE - SMALL should be hundreds of jobs, not
tens. stalkd ``always`` chooses between an inline fdatasync and its sync thread by measured
cost, so a server slowed by valgrind may take the other path than at full speed; the strace
figures (fdatasync, futex) say which one it took there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import server_bench as sb
from lockstep import drive, preload
from meters import PYCALLS, Callgrind, Meter, PyCalls, Strace, past_first_tick

KINDS = ("stalkd", "stalkd-py", "floor", "beanstalkd", "peer")
METERS = ("callgrind", "strace", "pycalls")
PYTHON_KINDS = ("stalkd", "stalkd-py", "floor", "peer")
PEER_SRC: str | None = None  # --peer-src: the src/ directory whose stalkd the "peer" column runs


@dataclass(frozen=True)
class Cell:
    klass: str  # memory | never | always
    work: str  # put | rd (reserve+delete) | wake (reserve waits, a put wakes it, delete)
    conns: int

    @property
    def name(self) -> str:
        return f"{self.klass}:{self.work}:{self.conns}"


CELLS = (Cell("memory", "put", 1), Cell("memory", "put", 16), Cell("memory", "rd", 1), Cell("memory", "rd", 16),
         Cell("never", "put", 1), Cell("always", "put", 1), Cell("never", "rd", 1), Cell("always", "rd", 1),
         Cell("memory", "wake", 1))


def parse_cell(text: str) -> Cell:
    """``CLASS:WORK:CONNS`` as --cell takes it, e.g. ``memory:put:16``."""
    for cell in CELLS:
        if cell.name == text:
            return cell
    raise argparse.ArgumentTypeError(f"unknown cell {text!r}; the cells: {', '.join(c.name for c in CELLS)}")


# --- servers under a meter --------------------------------------------------------------------


def _command(kind: str, klass: str, data_dir: str | None) -> tuple[list[str], dict[str, str]]:
    if kind == "peer":
        if PEER_SRC is None:
            raise ValueError("the peer server needs --peer-src")
        args, _ = sb.command("stalkd", klass, data_dir)
        return args, {**os.environ, "PYTHONPATH": PEER_SRC, "PYTHONHASHSEED": "0"}
    args, env = sb.command(kind, klass, data_dir)  # the floor's durable variant in never/always
    # one hash seed: a Python server's dict and set work is the same from run to run
    return args, {**(env or os.environ), "PYTHONHASHSEED": "0"}


@contextmanager
def metered(meter: str, kind: str, klass: str, scratch: Path) -> Iterator[tuple[int, Meter]]:
    """(port, meter) of a server of ``kind`` in ``klass`` started for ``meter``; stopped after."""
    data_dir = tempfile.mkdtemp(prefix=f"bench-counts-{kind}-", dir=sb.DATA_DIR) if klass != "memory" else None
    args, env = _command(kind, klass, data_dir)
    popen: dict[str, object] = {}
    timeout = 60.0
    if meter == "callgrind":
        args = ["valgrind", "--tool=callgrind", "-q", f"--callgrind-out-file={scratch}/cg.out", *args]
        timeout = 600.0  # a Python server starts in seconds under valgrind, more on a busy machine
    elif meter == "pycalls":
        args = [args[0], "-c", PYCALLS, *args[1:]]  # python -m MODULE ... or python SCRIPT ...
        popen = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    try:
        srv = sb.launch(kind, args, klass, data_dir, env, timeout, **popen)
    except BaseException:
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        raise
    m: Meter
    if meter == "callgrind":
        m = Callgrind(srv.proc.pid, scratch / "cg.out")
    elif meter == "strace":
        m = Strace(srv.proc.pid, scratch / "strace.out")
    else:
        m = PyCalls(srv.proc)
    try:
        if kind in ("stalkd", "stalkd-py", "peer"):
            past_first_tick(srv.proc.pid)
        yield srv.port, m
    finally:
        m.close()
        srv.stop()
        if srv.proc.stdin is not None:
            srv.proc.stdin.close()
        if srv.proc.stdout is not None:
            srv.proc.stdout.close()
        for f in scratch.glob("cg.out*"):
            f.unlink()


# --- the table --------------------------------------------------------------------------------


@dataclass
class Results:
    small: int
    large: int
    # per_job[meter][cell name][kind] = {counter: count per job}
    per_job: dict[str, dict[str, dict[str, dict[str, float]]]] = field(default_factory=dict)

    def put(self, meter: str, cell: Cell, kind: str, counts: dict[str, float]) -> None:
        self.per_job.setdefault(meter, {}).setdefault(cell.name, {})[kind] = counts

    def total(self, meter: str, cell: Cell, kind: str, key: str | None = None) -> float | None:
        counts = self.per_job.get(meter, {}).get(cell.name, {}).get(kind)
        if counts is None:
            return None
        return counts.get(key, 0.0) if key else sum(counts.values())


def _rounds(jobs: int, cell: Cell) -> int:
    return max(1, jobs // cell.conns)


def measure(meters: list[str], kinds: list[str], cells: list[Cell], small: int, large: int) -> Results:
    """Run every cell on every server under every meter; per-job counts by difference."""
    results = Results(small, large)
    serial = 0
    with tempfile.TemporaryDirectory(prefix="bench-counts-") as tmp:
        scratch = Path(tmp)
        for meter in meters:
            for kind in kinds:
                if meter == "pycalls" and kind not in PYTHON_KINDS:
                    continue
                for klass in dict.fromkeys(c.klass for c in cells):
                    # the floor answers a reserve with no job TIMED_OUT at once: no wake cells
                    todo = [c for c in cells if c.klass == klass and not (kind == "floor" and c.work == "wake")]
                    if not todo:
                        continue
                    t0 = time.monotonic()
                    _progress(f"{meter}: starting {kind} ({klass})")
                    with metered(meter, kind, klass, scratch) as (port, m):
                        for cell in todo:
                            t1 = time.monotonic()
                            ends = []
                            for jobs in (small, large):
                                serial += 1
                                rounds = _rounds(jobs, cell)
                                tubes = [b"n%d-%d" % (serial, i) for i in range(cell.conns)]
                                if cell.work == "rd":
                                    preload(port, tubes, rounds)
                                m.begin()
                                drive(port, cell.work, tubes, rounds)
                                ends.append((rounds * cell.conns, m.end()))
                            (j1, c1), (j2, c2) = ends
                            results.put(meter, cell, kind, {k: (c2[k] - c1[k]) / (j2 - j1) for k in set(c1) | set(c2)})
                            _progress(f"{meter}: {kind} {cell.name} done in {time.monotonic() - t1:.1f} s")
                    _progress(f"{meter}: {kind} ({klass}) done in {time.monotonic() - t0:.1f} s")
    return results


def _progress(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:7.2f}x" if a is not None and b else "       -"


def _fmt(v: float | None, meter: str) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if meter == "callgrind" else f"{v:,.2f}" if meter == "strace" else f"{v:,.1f}"


TITLES = {"callgrind": "user-space instructions per job (callgrind, the server process, all threads)",
          "strace": "system calls per job (strace -f -c attached to the server)",
          "pycalls": "Python function calls per job (sys.setprofile 'call' events; C calls from Python after the /)"}


def report(res: Results, kinds: list[str], cells: list[Cell], functions: bool = False) -> None:
    for meter, title in TITLES.items():
        if meter not in res.per_job:
            continue
        shown = [k for k in kinds if meter != "pycalls" or k in PYTHON_KINDS]
        print(f"\n## {title}")
        # beanstalkd is in C; peer: stalkd from --peer-src
        peers = [p for p in ("floor", "beanstalkd", "peer") if p in kinds and (meter != "pycalls" or p in PYTHON_KINDS)]
        print(f"{'cell':16} " + " ".join(f"{k:>13}" for k in shown) + "  "
              + " ".join(f"{s + '/' + p.replace('beanstalkd', 'bs'):>8}" for s in ("st", "py") for p in peers))
        key = "calls" if meter == "pycalls" else None
        for cell in cells:
            v = {k: res.total(meter, cell, k, key) for k in KINDS}
            row = []
            for k in shown:
                text = _fmt(v[k], meter)
                if meter == "pycalls" and v[k] is not None:
                    text += f"/{res.total(meter, cell, k, 'c calls'):.0f}"
                row.append(f"{text:>13}")
            print(f"{cell.name:16} " + " ".join(row) + "  "
                  + " ".join(_ratio(v[s], v[p]) for s in ("stalkd", "stalkd-py") for p in peers))
    if functions and "pycalls" in res.per_job:
        print("\n## Python calls per job by function (>= 0.5 per job; py: Python functions, c: C functions)")
        for cell in cells:
            for k in PYTHON_KINDS:
                counts = res.per_job["pycalls"].get(cell.name, {}).get(k)
                if counts is None or k not in kinds:
                    continue
                top = sorted(((n, f) for f, n in counts.items() if f not in ("calls", "c calls") and n >= 0.5),
                             key=lambda x: (-x[0], x[1]))
                _wrapped(f"{cell.name:16} {k:11} ", [f"{f} {n:.1f}" for n, f in top])
    if "strace" in res.per_job:
        print("\n## system calls per job by name (>= 0.05 per job)")
        for cell in cells:
            for k in kinds:
                counts = res.per_job["strace"].get(cell.name, {}).get(k)
                if counts is None:
                    continue
                names = ", ".join(f"{n} {c:.2f}" for n, c in sorted(counts.items(), key=lambda x: -x[1]) if c >= 0.05)
                print(f"{cell.name:16} {k:11} {names}")


def _wrapped(head: str, items: list[str], width: int = 100) -> None:
    """``items`` after ``head``, comma-separated, in lines of about ``width``, never split."""
    line = head
    for i, item in enumerate(items):
        text = item + ("," if i < len(items) - 1 else "")
        if len(line) + len(text) > width and line.strip():
            print(line.rstrip())
            line = " " * len(head)
        line += text + " "
    print(line.rstrip())


def missing_tools(meters: list[str]) -> list[str]:
    need = {"callgrind": ["valgrind", "callgrind_control"], "strace": ["strace"], "pycalls": []}
    return [tool for m in meters for tool in need[m] if shutil.which(tool) is None]


def main(meters: list[str], kinds: list[str], cells: list[Cell], small: int, large: int,
         json_path: str | None, functions: bool = False) -> int:
    if large <= small:
        print("--jobs: LARGE must be more than SMALL", file=sys.stderr)
        return 2
    if "peer" in kinds and PEER_SRC is None:
        print("--server peer: name its source tree with --peer-src DIR", file=sys.stderr)
        return 2
    if (missing := missing_tools(meters)) or ("beanstalkd" in kinds and shutil.which("beanstalkd") is None):
        print(f"not installed: {', '.join(missing or ['beanstalkd'])} (run scripts/system-deps.sh as root)",
              file=sys.stderr)
        return 1
    from stalkd.protocol import accel

    print(f"# floor_bench --counts: 100 B jobs, lockstep depth 1, {large} - {small} jobs per figure; "
          f"stalkd's hot path: {accel.IMPLEMENTATION}, stalkd-py: STALKD_NO_EXTENSIONS=1; "
          f"floor in never/always: its durable variant (-F / fdatasync per put and delete); beanstalkd "
          f"-F / -f 0; load {os.getloadavg()[0]:.1f}"
          + (f"; peer: stalkd from {PEER_SRC}" if "peer" in kinds else ""), flush=True)
    res = measure(meters, kinds, cells, small, large)
    report(res, kinds, cells, functions)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"small": small, "large": large, "per_job": res.per_job}, f, indent=1)
    return 0
