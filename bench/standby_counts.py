"""The primary's own work per acknowledged job with a standby, counted rather than timed (issue 34).

``standby_bench.py`` times the primary's CPU per job, but on 2 cores shared by the primary, its
standby and the load generators that figure is swollen by contention (the primary waits for a
CPU about as long with a sync standby as it runs), so it does not show the primary's own work.
This bench counts it: the primary runs under ``valgrind --tool=callgrind`` (only the primary:
its standby and the client run normally), and the instructions it executes in user space, all
threads, are read around each run (``meters.Callgrind``). The load is lockstep, as in
``floor_bench.py --counts`` (``lockstep.py``): each round sends ``DEPTH`` puts (100 B) on every
connection, then reads every reply, so a run does the same work whatever the primary's speed.
Each figure is the difference of two runs (``--jobs SMALL LARGE``) over the extra jobs: start-up,
connecting and the first send cancel. Setups, all ``always`` (an fsync per batch), each a new
primary with its own data directory: ``alone``, ``async`` (one standby) and ``sync``
(``--sync-standbys 1``: a reply waits for the standby's acknowledgement).

Meters (``--meter``, repeatable; default callgrind and strace):

  callgrind  user-space instructions per job of the primary process; ``--annotate N`` also lists,
             per cell, the N C functions whose self cost per job grew most from ``alone`` to
             ``sync`` (pure-Python code shows as the interpreter's functions, Cython modules
             by name)
  strace     the primary's system calls per job (strace -f -c attached for each run), by name
  pycalls    Python function calls per job (sys.setprofile, as floor_bench); ``--functions``
             lists the functions whose calls per job differ from ``alone``
  probe      nothing but the probe's batches and messages per job, at full speed (how the
             primary batches when valgrind does not slow it: a setup's cost per message from
             callgrind times this gives its cost per job at full speed)

Under callgrind and strace the primary runs through a probe (``PROBE``) that answers, on a line
read from stdin, its barriers' batch count (group commits), their fsyncs and the messages its
senders sent to standbys: per job they say how the runs batched (batches depend on timing:
under valgrind the primary is 50-100x slower than the standby and the client, so more jobs may
meet in a batch than at full speed; with 1 connection at depth 1 every batch is one job, the
cleanest comparison). The probe's thread waits in a read outside the measured runs and costs
them nothing.

Timers (the standby's heartbeats every ``wire.HEARTBEAT`` s, both ways) cost per second, not
per job, and do not cancel when the two runs take different times: each setup's idle cost
(instructions per second with no load) is measured first and the share it adds to a cell is
printed (``idle/job``: idle instructions per second times the extra wall time, per extra job).

``--standby`` meters the standby instead (callgrind, strace: its own work per job; the primary
and the client run normally, setups ``async`` and/or ``sync``): a sync standby's reply to a job
comes after the job is applied and acknowledged, so its count is complete when the run ends; an
async run ends once the primary reports the standby's lag at 0. ``--annotate N`` then lists the
N C functions of the standby with the most self cost per job.

Run: ``.venv/bin/python bench/standby_counts.py`` (about 10 minutes on 2 busy cores);
``--cells 1:1,16:1,1:64,16:64`` (CONNS:DEPTH), ``--setups``, ``--jobs``, ``--meter``;
``--keep-dumps DIR`` keeps each callgrind run's dump (``callgrind_annotate --inclusive=yes
--tree=calling`` on the two runs of a setup says which calls a job's extra instructions are in);
``--peer-src DIR`` adds the same setups of the stalkd in ``DIR`` (the ``src/`` of another
checkout, its compiled modules built in place; its checkout's ``.venv`` runs it when there is
one), ``base-*``, for a before/after in one run. valgrind and strace: scripts/system-deps.sh.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import server_bench as sb  # noqa: E402
from lockstep import PUT, _expect, _on_tube, _Reader  # noqa: E402
from meters import PYCALLS, Callgrind, Meter, PyCalls, Strace, past_first_tick  # noqa: E402

from support import wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)

SETUPS = ("alone", "async", "sync")
METERS = ("callgrind", "strace", "pycalls", "probe")
CELLS = ((1, 1), (16, 1), (1, 64), (16, 64))
IDLE_SECONDS = 3.0

# Run ``stalkd serve`` (argv after -c) and answer each line read on stdin with the primary's
# replication counters so far, as "batches syncs messages" on the original stdout. Replicas is
# found by a subclass that keeps each one made (the server makes one; a compiled Replicas is an
# extension type, whose constructor cannot be replaced); the barriers are its on_replicated's owner.
PROBE = """
import os, sys, threading
import stalkd.replication.sender as _s
_found = []
class _Kept(_s.Replicas):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        _found.append(self)
_s.Replicas = _Kept
out = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
def answer():
    for _ in sys.stdin:
        if not _found:
            out.write("0 0 0\\n")
        else:
            r = _found[-1]
            b = r.on_replicated.__self__
            sent = sum(sum(s.sent.values()) for s in list(r.senders))
            out.write("%d %d %d\\n" % (b.written, b.syncs, sent))
        out.flush()
threading.Thread(target=answer, daemon=True).start()
from stalkd.cli import main
sys.argv = ["stalkd", *sys.argv[1:]]
sys.exit(main())
"""


@dataclass(frozen=True)
class Tree:
    name: str  # "" for this checkout, "base-" for --peer-src
    python: str
    env: dict[str, str]


@dataclass
class Figures:
    """Per job, by counter (instructions, a system call's name, py FUNCTION...), plus the
    probe's batches/messages per job and the wall seconds of the two runs."""

    counts: dict[str, float] = field(default_factory=dict)
    probe: dict[str, float] = field(default_factory=dict)
    seconds: tuple[float, float] = (0.0, 0.0)


def _secret(scratch: str) -> str:
    path = os.path.join(scratch, "replication.secret")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(os.urandom(24).hex())
    return path


class Pair:
    """A primary under ``meter`` (with the probe, or under pycalls) and, unless alone, its
    standby (run normally); ``standby``: the standby under ``meter`` instead, the primary with
    the probe alone."""

    def __init__(self, tree: Tree, setup: str, meter: str, scratch: Path, standby: bool = False) -> None:
        self.setup = setup
        self.metered_standby = standby
        self.dirs = [tempfile.mkdtemp(prefix=f"standby-counts-{setup}-", dir=sb.DATA_DIR)]
        secret = _secret(self.dirs[0])
        self.dirs.append(tempfile.mkdtemp(prefix=f"standby-counts-{setup}-p-", dir=sb.DATA_DIR))
        flags = ["-l", "127.0.0.1", "-p", "0", "--log-level", "warning", "--replication-secret", secret]
        env = {**tree.env, "PYTHONHASHSEED": "0"}  # one hash seed: dict and set work alike per run
        sync = ["--sync-standbys", "1"] if setup == "sync" else []
        serve = ["serve", *flags, "--dir", self.dirs[-1], *sync]
        popen: dict[str, object] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
        timeout = 60.0
        if meter == "pycalls":
            args = [tree.python, "-c", PYCALLS, "-m", "stalkd.cli", *serve]
        else:
            args = [tree.python, "-c", PROBE, *serve]
            if meter == "callgrind" and not standby:
                args = ["valgrind", "--tool=callgrind", "-q", f"--callgrind-out-file={scratch}/cg.out", *args]
                timeout = 600.0
        self.primary = sb.launch(f"primary {setup}", args, "always", None, env, timeout, **popen)
        past_first_tick(self.primary.proc.pid)
        self.probing = meter != "pycalls"
        self.standby: subprocess.Popen[bytes] | None = None
        if setup != "alone":
            self.dirs.append(tempfile.mkdtemp(prefix=f"standby-counts-{setup}-s-", dir=sb.DATA_DIR))
            args = [tree.python, "-m", "stalkd.cli", "serve", *flags, "--dir", self.dirs[-1],
                    "--standby-of", f"127.0.0.1:{self.primary.port}"]  # fmt: skip
            if meter == "callgrind" and standby:
                args = ["valgrind", "--tool=callgrind", "-q", f"--callgrind-out-file={scratch}/cg.out", *args]
                timeout = 600.0
            self.standby = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for_listener(self.standby, timeout, "standby")
            self._wait_following(timeout)
            if standby:
                past_first_tick(self.standby.pid)
        metered = self.standby.pid if standby and self.standby is not None else self.primary.proc.pid
        self.meter: Meter
        if meter == "callgrind":
            self.meter = KeptCallgrind(metered, scratch / "cg.out")
        elif meter == "strace":
            self.meter = Strace(metered, scratch / "strace.out")
        elif meter == "probe":
            self.meter = _Nothing()
        else:
            self.meter = PyCalls(self.primary.proc)

    def _wait_following(self, timeout: float, line: bytes = b"\nstandbys: 1\n", what: str = "streamed") -> None:
        """Until the primary's stats have ``line`` (by default: it counts one standby streaming)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), \
                    socket.create_connection(("127.0.0.1", self.primary.port), timeout=60) as s:  # fmt: skip
                s.sendall(b"stats\r\n")
                r = _Reader(s)
                head = r.line()
                n = int(head.split()[1])
                while len(r.buf) < n + 2:
                    r._more()
                if line in r.buf[:n]:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the standby never {what}")

    def settle(self) -> None:
        """A metered async standby: until it has caught up (its work for the run is done)."""
        if self.metered_standby and self.setup == "async":
            self._wait_following(600.0, b"\nstandby-lag: 0\n", "caught up")

    def probe(self) -> tuple[int, int, int]:
        """(batches, fsyncs, messages sent to standbys) so far."""
        if not self.probing:
            return (0, 0, 0)
        proc = self.primary.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        a, b, c = proc.stdout.readline().split()
        return int(a), int(b), int(c)

    def stop(self) -> None:
        self.meter.close()
        if self.standby is not None:
            self.standby.terminate()
            try:
                self.standby.wait(10)
            except subprocess.TimeoutExpired:
                self.standby.kill()
                self.standby.wait()
        self.primary.stop()
        for f in (self.primary.proc.stdin, self.primary.proc.stdout):
            if f is not None:
                f.close()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)


class _Nothing:
    """No meter: the probe's batches and messages per job at full speed."""

    def begin(self) -> None:
        pass

    def end(self) -> Counter[str]:
        return Counter()

    def close(self) -> None:
        pass


class KeptCallgrind(Callgrind):
    """``meters.Callgrind`` that keeps each dump (``last``), for callgrind_annotate."""

    last: Path | None = None
    timeout = 300.0

    def _done(self, dump: Path) -> None:
        if self.last is not None:
            self.last.unlink(missing_ok=True)
        self.last = dump


def self_costs(dump: Path) -> Counter[str]:
    """Self instructions by function (file:function) in one callgrind dump."""
    done = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", "--auto=no", str(dump)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    costs: Counter[str] = Counter()
    for line in done.stdout.splitlines():
        m = re.match(r"\s*([\d,]+)(?: \([^)]*\))?\s+(\S.*?)(?: \[[^]]*\])?$", line)
        if m and ":" in m.group(2) and not m.group(2).startswith("PROGRAM TOTALS"):
            costs[m.group(2)] += int(m.group(1).replace(",", ""))
    return costs


def drive(port: int, conns: int, depth: int, rounds: int, serial: int) -> None:
    """``rounds`` lockstep rounds: ``depth`` puts on every connection (each on its own tube),
    then every reply."""
    socks = [_on_tube(port, b"c%d-%d" % (serial, i)) for i in range(conns)]
    try:
        readers = [_Reader(s) for s in socks]
        burst = PUT * depth
        for _ in range(rounds):
            for s in socks:
                s.sendall(burst)
            for r in readers:
                for _ in range(depth):
                    _expect(r.line(), b"INSERTED")
    finally:
        for s in socks:
            s.close()


def measure_pair(pair: Pair, meter: str, cells: list[tuple[int, int]], small: int, large: int,
                 annotate: bool, keep: Path | None = None,
                 name: str = "") -> tuple[float, dict[tuple[int, int], Figures], dict[tuple[int, int], Counter[str]]]:  # fmt: skip
    """(idle counts per second, figures per cell, self costs per job by function per cell);
    ``keep``: copy each run's callgrind dump there (``NAME-CONNSxDEPTH-JOBS.cg``)."""
    idle = 0.0
    if meter == "callgrind":
        pair.meter.begin()
        time.sleep(IDLE_SECONDS)
        idle = pair.meter.end()["instructions"] / IDLE_SECONDS
    out: dict[tuple[int, int], Figures] = {}
    fns: dict[tuple[int, int], Counter[str]] = {}
    serial = 0
    for conns, depth in cells:
        ends = []
        dumps: list[Counter[str]] = []
        per_round = conns * depth
        few = max(1, small // per_round)
        for rounds in (few, max(large // per_round, few * large // small)):  # never the same
            serial += 1
            p0 = pair.probe()
            pair.meter.begin()
            t0 = time.monotonic()
            drive(pair.primary.port, conns, depth, rounds, serial)
            pair.settle()
            dt = time.monotonic() - t0
            c = pair.meter.end()
            p1 = pair.probe()
            ends.append((rounds * conns * depth, c, [b - a for a, b in zip(p0, p1, strict=True)], dt))
            if isinstance(pair.meter, KeptCallgrind) and pair.meter.last is not None:
                if keep is not None:
                    shutil.copyfile(pair.meter.last, keep / f"{name}-{conns}x{depth}-{rounds * per_round}.cg")
                if annotate:
                    dumps.append(self_costs(pair.meter.last))
        (j1, c1, p1_, t1), (j2, c2, p2_, t2) = ends
        n = j2 - j1
        fig = Figures({k: (c2[k] - c1[k]) / n for k in set(c1) | set(c2)}, seconds=(t1, t2))
        fig.probe = {name: (b - a) / n for name, a, b in zip(("batches", "fsyncs", "messages"), p1_, p2_, strict=True)}
        fig.probe["idle"] = idle * (t2 - t1) / n
        out[(conns, depth)] = fig
        if dumps:
            fns[(conns, depth)] = Counter({k: (dumps[1][k] - dumps[0][k]) / n for k in set(dumps[0]) | set(dumps[1])})
        _progress(f"{meter}: {conns}:{depth} done ({t1:.1f} s, {t2:.1f} s)")
    return idle, out, fns


def _progress(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _total(meter: str, fig: Figures) -> float:
    if meter == "pycalls":
        return fig.counts.get("calls", 0.0)
    return sum(fig.counts.values())


def report(meter: str, trees: list[Tree], setups: list[str], cells: list[tuple[int, int]],
           res: dict[str, dict[tuple[int, int], Figures]], idle: dict[str, float], functions: bool,
           who: str = "primary") -> None:  # fmt: skip
    title = {"callgrind": f"{who}'s user-space instructions per job (callgrind, all threads)",
             "strace": f"{who}'s system calls per job (strace -f -c)",
             "probe": "batches and messages per job at full speed (no meter)",
             "pycalls": "primary's Python function calls per job (sys.setprofile)"}[meter]
    print(f"\n## {title}")
    if meter == "callgrind":
        print("# idle (timers, heartbeats), instructions per second: "
              + ", ".join(f"{k} {v:,.0f}" for k, v in idle.items()))
    fmt = "{:,.0f}" if meter != "strace" else "{:.2f}"
    for tree in trees:
        head = f"{'conns:depth':>11}"
        for s in setups:
            head += f" | {tree.name + s:>12}" + (f" {'ratio':>6}" if s != "alone" else "")
        print(head + " | batches/job msgs/job (per setup)" + (" | idle/job" if meter == "callgrind" else ""))
        for cell in cells:
            figs = [res[tree.name + s][cell] for s in setups]
            base = _total(meter, figs[0]) if setups[0] == "alone" else 0.0
            row = f"{cell[0]:>5}:{cell[1]:<5}"
            for s, f in zip(setups, figs, strict=True):
                v = _total(meter, f)
                row += f" | {fmt.format(v):>12}" + (f" {v / base:5.2f}x" if s != "alone" and base else "")
            row += " | " + " ".join(f"{f.probe.get('batches', 0):.2f}/{f.probe.get('messages', 0):.2f}" for f in figs)
            if meter == "callgrind":
                row += " | " + " ".join(f"{f.probe.get('idle', 0):,.0f}" for f in figs)
            print(row)
    if meter == "strace":
        print("# by name (>= 0.05 per job)")
        for tree in trees:
            for cell in cells:
                for s in setups:
                    c = res[tree.name + s][cell].counts
                    names = ", ".join(f"{n} {v:.2f}" for n, v in sorted(c.items(), key=lambda x: -x[1]) if v >= 0.05)
                    print(f"{cell[0]:>5}:{cell[1]:<5} {tree.name + s:12} {names}")
    if meter == "pycalls" and functions:
        print("# Python functions whose calls per job differ from alone by >= 0.2 (py: Python, c: C)")
        for tree in trees:
            for cell in cells:
                a = res[tree.name + "alone"][cell].counts
                for s in setups[1:]:
                    c = res[tree.name + s][cell].counts
                    diff = sorted(((c.get(k, 0) - a.get(k, 0), k) for k in set(a) | set(c)
                                   if k not in ("calls", "c calls") and abs(c.get(k, 0) - a.get(k, 0)) >= 0.2),
                                  key=lambda x: -abs(x[0]))  # fmt: skip
                    print(f"{cell[0]:>5}:{cell[1]:<5} {tree.name + s:12} " + ", ".join(f"{k} {d:+.1f}" for d, k in diff))


def report_functions(trees: list[Tree], setups: list[str], cells: list[tuple[int, int]],
                     res: dict[str, dict[tuple[int, int], Figures]],
                     fns: dict[str, dict[tuple[int, int], Counter[str]]], top: int) -> None:  # fmt: skip
    print(f"\n## where the extra instructions go: self cost per job by C function, the {top} that grew most from alone")
    for tree in trees:
        for cell in cells:
            a = fns.get(tree.name + "alone", {}).get(cell)
            if a is None:
                continue
            for s in setups[1:]:
                c = fns.get(tree.name + s, {}).get(cell)
                if c is None:
                    continue
                report_top(f"{tree.name + s} - alone", c, a, res[tree.name + "alone"][cell], res[tree.name + s][cell],
                           cell, top)


def report_standby_functions(trees: list[Tree], setups: list[str], cells: list[tuple[int, int]],
                             res: dict[str, dict[tuple[int, int], Figures]],
                             fns: dict[str, dict[tuple[int, int], Counter[str]]], top: int) -> None:  # fmt: skip
    print(f"\n## where the standby's instructions go: self cost per job by C function, the {top} largest")
    for tree in trees:
        for cell in cells:
            for s in setups:
                c = fns.get(tree.name + s, {}).get(cell)
                if c is not None:
                    report_top(tree.name + s, c, Counter(), Figures(), res[tree.name + s][cell], cell, top)


def report_top(what: str, c: Counter[str], a: Counter[str], ta: Figures, tc: Figures, cell: tuple[int, int],
               top: int) -> None:  # fmt: skip
    """The ``top`` functions whose self cost per job grew most from ``a`` to ``c``."""
    # A dump taken mid-run charges the functions on the stack then (main, the
    # loop's run_forever...) with what their callees ran: no leaf function is half
    # of a job, so what claims that much is one of them and is left out.
    keep = [k for k in set(a) | set(c)
            if (not a or a.get(k, 0) < 0.5 * _total("callgrind", ta))
            and c.get(k, 0) < 0.5 * _total("callgrind", tc)]  # fmt: skip
    diff = sorted(((c.get(k, 0) - a.get(k, 0), k) for k in keep), key=lambda x: -x[0])
    total = sum(d for d, _ in diff)
    print(f"# {cell[0]}:{cell[1]} {what}: {total:+,.0f} per job in leaf functions; by "
          "where they are: " + ", ".join(f"{g} {d:+,.0f}" for g, d in _by_library(diff)))
    for d, k in diff[:top]:
        where, _, fn = k.rpartition(":")
        print(f"    {d:+8,.0f}  {a.get(k, 0):8,.0f} -> {c.get(k, 0):8,.0f}  {fn}  ({os.path.basename(where)})")


def _by_library(diff: list[tuple[float, str]]) -> list[tuple[str, float]]:
    """The differences summed by where the function is: the interpreter, uvloop, stalkd's
    compiled modules, the C library (its system call wrappers among them), the rest."""
    groups: Counter[str] = Counter()
    for d, k in diff:
        where = k.rpartition(":")[0]
        g = ("interpreter" if "Python-3" in where or "/python3" in where else "uvloop" if "uvloop" in where
             else "stalkd (compiled)" if "stalkd" in where else "libc" if where.startswith("./") else "other")
        groups[g] += d
    return sorted(groups.items(), key=lambda x: -abs(x[1]))


def _parse_cells(text: str) -> list[tuple[int, int]]:
    cells = []
    for item in text.split(","):
        conns, _, depth = item.partition(":")
        if not (conns.isdigit() and depth.isdigit()):
            raise argparse.ArgumentTypeError(f"a cell is CONNS:DEPTH, not {item!r}")
        cells.append((int(conns), int(depth)))
    return cells


def _peer_python(src: str) -> str:
    venv = os.path.join(os.path.dirname(os.path.abspath(src)), ".venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=_parse_cells, default=list(CELLS), metavar="CONNS:DEPTH,...",
                    help="default 1:1,16:1,1:64,16:64")
    ap.add_argument("--setups", default=",".join(SETUPS), help="of alone,async,sync (default all three)")
    ap.add_argument("--jobs", type=int, nargs=2, metavar=("SMALL", "LARGE"), default=[256, 1280],
                    help="jobs in the two runs of each cell (default 256 1280)")
    ap.add_argument("--meter", action="append", choices=METERS, help="default callgrind and strace")
    ap.add_argument("--peer-src", metavar="DIR", help="also run the stalkd in DIR (its src/): setups base-*")
    ap.add_argument("--annotate", type=int, default=0, metavar="N",
                    help="callgrind: the N C functions whose self cost per job grew most from alone")
    ap.add_argument("--keep-dumps", type=Path, metavar="DIR",
                    help="callgrind: keep each run's dump in DIR (for callgrind_annotate --inclusive=yes)")
    ap.add_argument("--functions", action="store_true", help="pycalls: the functions called more than alone")
    ap.add_argument("--standby", action="store_true", help="meter the standby, not the primary (async, sync)")
    a = ap.parse_args()
    setups = [s for s in a.setups.split(",") if s]
    if a.standby:
        setups = [s for s in setups if s != "alone"]
        if not setups or any(s not in SETUPS for s in setups) or set(a.meter or ()) - {"callgrind", "strace"}:
            ap.error("--standby: setups async and/or sync; meters callgrind and/or strace")
    elif any(s not in SETUPS for s in setups) or setups[0] != "alone":
        ap.error("--setups: alone first, then async and/or sync")
    meters = a.meter or ["callgrind", "strace"]
    need = {"callgrind": ["valgrind", "callgrind_control", "callgrind_annotate"], "strace": ["strace"], "pycalls": [],
            "probe": []}
    if missing := [t for m in meters for t in need[m] if shutil.which(t) is None]:
        ap.error(f"not installed: {', '.join(missing)} (scripts/system-deps.sh)")
    trees = [Tree("", sys.executable, dict(os.environ))]
    if a.peer_src:
        src = os.path.abspath(a.peer_src)
        trees.append(Tree("base-", _peer_python(src), {**os.environ, "PYTHONPATH": src}))
    small, large = a.jobs
    who = "standby" if a.standby else "primary"
    print(f"# standby_counts: put 100 B, always, lockstep, {large} - {small} jobs per figure; {who} "
          f"measured, {'primary' if a.standby else 'standby'} and client unmetered; load {os.getloadavg()[0]:.1f}"
          + (f"; base-*: {a.peer_src}" if a.peer_src else ""), flush=True)
    with tempfile.TemporaryDirectory(prefix="standby-counts-") as tmp:
        for meter in meters:
            res: dict[str, dict[tuple[int, int], Figures]] = {}
            idle: dict[str, float] = {}
            fns: dict[str, dict[tuple[int, int], Counter[str]]] = {}
            for tree in trees:
                for setup in setups:
                    name = tree.name + setup
                    _progress(f"{meter}: starting {name}")
                    pair = Pair(tree, setup, meter, Path(tmp), a.standby)
                    try:
                        idle[name], res[name], fns[name] = measure_pair(pair, meter, a.cells, small, large,
                                                                        a.annotate > 0, a.keep_dumps, name)  # fmt: skip
                    finally:
                        pair.stop()
                        for f in Path(tmp).glob("cg.out*"):
                            f.unlink()
            report(meter, trees, setups, a.cells, res, idle, a.functions, who)
            if meter == "callgrind" and a.annotate:
                (report_standby_functions if a.standby else report_functions)(trees, setups, a.cells, res, fns,
                                                                              a.annotate)  # fmt: skip
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
