"""Hot standby cost, same machine, same run: a primary alone vs with 1 asynchronous standby vs
with 1 synchronous standby (``--sync-standbys 1``), all ``always`` (fsync before every reply).

Cells: durable put and reserve+delete (100-byte bodies), 16 connections (``--conns``), pipeline
depth 1 and 64, through ``server_bench``'s load generator; each cell runs BENCH_ROUNDS times with the setups
alternating and medians are printed, with each setup's ratio to the primary alone; under each
cell, the ratios of each round to the primary alone in that round (median and quartiles), the
steadier figure on a machine whose speed drifts between rounds. Two figures
per setup and cell:

- throughput (jobs/s), and its ratio to the primary alone (targets: 1 sync standby >= 0.75x
  pipelined, >= 0.6x at depth 1);
- the *primary's* CPU per acknowledged job (its process CPU time, the sum of its threads' time
  on a CPU from /proc/PID/task/*/schedstat, over the cell divided by the jobs acknowledged in
  it, in microseconds), and its ratio to the
  primary alone (targets: <= 1.1x with 1 async standby, <= 1.3x with 1 sync standby). On one
  machine the standby competes for the same cores, so throughput alone mixes the standby's
  work with the primary's; this column is the primary's own extra work per job (sending frames,
  reading acknowledgements, waking up for them). The standby's CPU per job is printed too.
  Under each cell a line says how starved the primary and the standby were: the seconds each
  was runnable but waiting for a CPU per second it ran (schedstat's run delay), the figure
  that tells a loaded machine from a slow standby.
  Reserve+delete drains ``server_bench``'s fixed stock (3,000 jobs under ``always``): its cells
  last a fraction of a second, so their CPU per job is rough; put cells run the whole time.

``--stand-in`` adds setups where a stand-in (``standby_standin.py``: it streams and checks
every message like a standby, keeps no log, applies nothing) takes the standby's place:
``stand-in-async`` acknowledges each read at once; ``stand-in-sync`` (``--sync-standbys 1``)
writes each read into a zero-filled file (as the floor standby's) and fdatasyncs it first. The primary does all of its replication
work against them while the second process costs the shared cores almost nothing, so their
``stand-in`` row splits what a standby costs: the primary's own work and the round trip with
the standby's fsync on the same disk (the stand-in row) against that plus the real standby's
CPU per record (the ``after`` row). A third, ``stand-in-ack-sync`` (the ``no fsync`` row's sync
column), is ``--sync-standbys 1`` with a stand-in that acknowledges each read at once: the
primary's replies still wait for a round trip to a second process, but for no second fsync,
so it splits the primary's own replication work from the standby's disk.

``--floor`` adds the same three setups for the floor server (``floor_server.py --group``: a loop
iteration's puts in one pwrite and one fdatasync, each batch streamed to a floor standby before
that fdatasync; the standby appends, fdatasyncs and acknowledges each read; ``floor-sync``'s
replies wait for that acknowledgement). The floor does nothing but that, so its ``floor`` row is
the ratio the least a Python primary and standby reach on this machine: the targets above judged
as stalkd/floor, as the depth-1 cells of ``server_bench.py`` are.

``--counts`` (needs ``perf``) also counts, per acknowledged job, what the primary and the
standby asked of the kernel over each cell (``perf stat`` attached to each process: its system
calls, context switches, futex calls, fdatasyncs and, for the standby, appends, its
``pwrite``), printed as a line per setup under each cell, medians of the rounds. Time per job
on a shared 2-core machine swings with everyone else's load; these counts do not, so they tell
work the code does (a send, an acknowledgement, a thread hand-off) from time it waited.

``--budget`` prints, per setup under each cell, where a job's CPU went and whether the machine
had any to spare: the primary's and the standby's user and system time per job (/proc clock
ticks: rough over a short cell), the load generators' CPU per job, the machine's busy and idle
cores over the cell (/proc/stat: the other users of a shared machine included), the shares of
the cell's wall time the primary's and the standby's event loops spent on a CPU, runnable but
waiting for one, and asleep (waiting for clients, the peer or the disk: a pair bound by its
round trips sleeps, a pair bound by the CPU waits for one), and the primary's WAL batches,
fsyncs and messages to standbys per job (the primary then runs through
``standby_counts.PROBE``, which answers those counters on a line read from stdin).

``--trace`` (needs ``perf``) runs each cell once more on each sync pair with the primary's and
the standby's system calls recorded, and prints the path of a batch: the primary's send (its
frames message, right after its WAL write) -> the standby's append -> the start and end of the
standby fsync that covers it -> the acknowledgement written -> read by the primary, against the
primary's own WAL write -> fsync done; and for how many batches the acknowledgement, not the
local fsync, was what the replies waited for. Each step's median, mean and 90th percentile: the
means of the steps from the send to the ack read add up to that whole path's mean (medians do
not). Also: how many client connections the primary read between an acknowledgement's write and
its read (the loop in the middle of an iteration), and from its read to the first reply.
(A batch split over several messages, behind a standby catching up, is not matched.) Where the
two waits of the path were spent (the processes' switches off a CPU are recorded too): for
how many sends the standby's loop was busy (not asleep waiting for the socket), and the send ->
append median either way; for how many acknowledgements the primary's loop was inside an
fsync (of a later batch: inline, so the loop reads nothing until it returns), and the ack ->
read median either way. With ``--floor`` the floor pair is traced too, its steps the same (its
frames message is its batch behind a 4-byte length): the path the least a Python pair takes.

Also: the largest standby lag the primary reported (``stats``: ``standby-lag``, records) while
the cells ran (read every ``LAG_EVERY`` s on one connection, so that the reading costs the
asynchronous pair's primary, whose CPU per job is a target, about 0.1 % of a core), and the
time from SIGUSR2 (promotion) to the first put the standby accepts.

Run: ``.venv/bin/python bench/standby_bench.py`` (env as server_bench: BENCH_SECONDS,
BENCH_ROUNDS, GEN_PROCS; ``--cells put:1,put:64`` runs fewer cells). Servers listen on port 0
and the port is read from /proc. ``--peer-src DIR`` (or ``BENCH_BASELINE_SRC=DIR``) adds three
setups, ``base-alone``, ``base-async`` and ``base-sync``: the same three running the stalkd
package found in ``DIR`` (the ``src/`` of an earlier checkout, e.g. /work/peer-main/src; its
checkout's ``.venv`` runs it when there is one, so its compiled modules are its own), so a
change is measured against what it replaces in the same run: the ``before`` lines give the
peer's ratios to its own primary alone. The pairs of this checkout authenticate their standby
(``--replication-secret``); a peer of a build without that flag runs without it.
``--records-standby`` (with ``--peer-src`` of a build whose standby does not ask for frames
messages, as before they were negotiated) adds ``rec-async`` and ``rec-sync``: this checkout's
primary with the peer's standby, which gets records messages (R), the path an older standby
takes during a rolling upgrade; the ``R-path`` lines give their ratios to this checkout's
primary alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import server_bench as sb  # noqa: E402  (bench/server_bench.py: generator and cells)
import targets  # noqa: E402  (bench/targets.py: a spread of ratios)
from meters import perf_script  # noqa: E402  (bench/meters.py: a perf trace over one run)

import stalkd  # noqa: E402
from stalkd.client import errors  # noqa: E402
from support import wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)

BASELINE = os.environ.get("BENCH_BASELINE_SRC")
SETUPS: tuple[str, ...] = ("alone", "async", "sync")
PEER_SETUPS = ("base-alone", "base-async", "base-sync")
RECORDS_SETUPS = ("rec-async", "rec-sync")  # our primary, the peer's standby (--records-standby)
# (stand-in-ack-sync: --sync-standbys 1, the stand-in acknowledging each read at once, no fsync)
STAND_IN_SETUPS = ("stand-in-async", "stand-in-sync", "stand-in-ack-sync")
FLOOR_SETUPS = ("floor-alone", "floor-async", "floor-sync")  # --floor: floor_server.py --group
CELLS = [("put", 1), ("put", 64), ("rd", 1), ("rd", 64)]
CONNS = 16
LAG_EVERY = 0.2  # seconds between readings of the async pair's standby lag
PROBING = False  # --budget: primaries run through standby_counts.PROBE (their batches, messages)
# --counts: (perf event, column): system calls, context switches, futex calls (thread
# hand-offs and GIL exchanges), fdatasyncs, pwrites (a standby's appends)
COUNTS = (("raw_syscalls:sys_enter", "sys"), ("context-switches", "cs"), ("syscalls:sys_enter_futex", "futex"),
          ("syscalls:sys_enter_fdatasync", "fsync"), ("syscalls:sys_enter_pwrite64", "pwrite"))


def _peer_python(src: str) -> str:
    """The interpreter of the peer's checkout (its venv: its own compiled modules), else ours."""
    venv = os.path.join(os.path.dirname(os.path.abspath(src)), ".venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def _knows_secret(src: str) -> bool:
    with contextlib.suppress(OSError), open(os.path.join(src, "stalkd", "server", "config.py")) as f:
        return "replication-secret" in f.read()
    return False


class Server(sb.Server):
    """``server_bench``'s server, its CPU time read in nanoseconds: the sum over its threads of
    the time on a CPU (``/proc/PID/task/*/schedstat``), not /proc's clock ticks (10 ms each,
    too coarse for a short cell's CPU per job). A thread that ended during the cell is not
    counted (the server's threads live as long as it does). ``on_mark``: called at each reading
    (``run_cell`` reads the primary's at the cell's start and end: ``--budget`` takes its other
    readings at the same moments)."""

    on_mark: Callable[[], None] | None = None

    def cpu_seconds(self) -> float:
        if self.on_mark is not None:
            self.on_mark()
        return self.sched()[0]

    def loop_sched(self) -> tuple[float, float]:
        """(seconds on a CPU, seconds runnable but waiting for one) of its main thread (the
        event loop's)."""
        with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/schedstat") as f:
            fields = f.read().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9

    def user_sys(self) -> tuple[float, float]:
        """(user, system) CPU seconds of the whole process (/proc/PID/stat: clock ticks)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) / sb.TICKS, int(fields[12]) / sb.TICKS

    def sched(self) -> tuple[float, float]:
        """(seconds on a CPU, seconds runnable but waiting for one), summed over its threads."""
        on = wait = 0
        root = f"/proc/{self.proc.pid}/task"
        for tid in os.listdir(root):
            with contextlib.suppress(OSError), open(f"{root}/{tid}/schedstat") as f:
                fields = f.read().split()
                on += int(fields[0])
                wait += int(fields[1])
        return on / 1e9, wait / 1e9


class Pair:
    """A primary and, unless ``alone``, its standby."""

    def __init__(self, setup: str) -> None:
        self.setup = setup
        self.dirs = [tempfile.mkdtemp(prefix=f"standby-bench-{setup}-", dir="/var/tmp")]
        flags = ["--sync-standbys", "1"] if setup.endswith("sync") and "async" not in setup else []
        peer = setup.startswith("base")
        self.cmd = sb.STALKD
        self.env: dict[str, str] | None = None
        src = os.path.abspath(BASELINE or "")
        peer_run = ([_peer_python(src), *sb.STALKD[1:]], {**os.environ, "PYTHONPATH": src})
        if peer:
            self.cmd, self.env = peer_run
        secret: list[str] = []
        if not peer or _knows_secret(os.path.abspath(BASELINE or "")):  # standbys prove a secret
            self.dirs.append(tempfile.mkdtemp(prefix="standby-bench-secret-", dir="/var/tmp"))
            path = os.path.join(self.dirs[-1], "replication.secret")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                f.write(os.urandom(24).hex())
            secret = ["--replication-secret", path]
        self.standby: Server | None = None
        self.probing = False
        if setup.startswith("floor"):
            self._floor_pair()
            return
        self.primary = self._start(self.dirs[0], [*flags, *secret], probe=PROBING)
        if setup.startswith("stand-in"):
            self.standby = self._stand_in(secret[1], setup == "stand-in-sync")
            self.wait_following()
        elif not setup.endswith("alone"):
            self.dirs.append(tempfile.mkdtemp(prefix="standby-bench-s-", dir="/var/tmp"))
            self.standby = self._start(self.dirs[-1], ["--standby-of", f"127.0.0.1:{self.primary.port}", *secret],
                                       *(peer_run if setup in RECORDS_SETUPS else ()))  # fmt: skip
            self.wait_following()

    def _start(self, d: str, flags: list[str], cmd: list[str] | None = None,
               env: dict[str, str] | None = None, probe: bool = False) -> Server:  # fmt: skip
        """A server of this pair's build (``cmd``/``env``: another's); ``probe``: through
        ``standby_counts.PROBE``, which answers a line on stdin with its counters (``probe``)."""
        if cmd is None:
            cmd, env = self.cmd, self.env
        args = [*cmd, "-l", "127.0.0.1", "-p", "0", "--log-level", "warning", "--dir", d, *flags]
        pipes: dict[str, int] = {"stdout": subprocess.DEVNULL}
        if probe:
            from standby_counts import PROBE  # (bench/standby_counts.py)

            args = [cmd[0], "-c", PROBE, *args[cmd.index("serve"):]]
            pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
            self.probing = True
        proc = subprocess.Popen(args, stderr=subprocess.DEVNULL, env=env, **pipes)  # type: ignore[call-overload]
        port = wait_for_listener(proc, 30, "stalkd")
        return Server("stalkd", proc, port, None, "always")

    def probe(self) -> tuple[int, int, int]:
        """(WAL batches, their fsyncs, messages sent to standbys) of the primary so far (0s when
        it does not run through the probe)."""
        proc = self.primary.proc
        if not self.probing or proc.stdin is None or proc.stdout is None:
            return (0, 0, 0)
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        a, b, c = proc.stdout.readline().split()
        return int(a), int(b), int(c)

    def _floor_pair(self) -> None:
        """``floor_server.py --group``: the floor committing in groups, and unless ``floor-alone``
        a floor standby it streams each batch to (``floor-sync``: replies wait for its disk)."""
        floor = [sys.executable, os.path.join(HERE, "floor_server.py")]
        link: list[str] = []
        if self.setup != "floor-alone":
            self.dirs.append(tempfile.mkdtemp(prefix="standby-bench-floor-s-", dir="/var/tmp"))
            proc = subprocess.Popen([*floor, "--standby-dir", self.dirs[-1]], stdout=subprocess.DEVNULL)
            self.standby = Server("floor standby", proc, wait_for_listener(proc, 60, "floor standby"), None, "always")
            link = ["--standby-port", str(self.standby.port)]
            if self.setup == "floor-sync":
                link.append("--wait-standby")
        proc = subprocess.Popen([*floor, "--sync-dir", self.dirs[0], "--group", *link], stdout=subprocess.DEVNULL)
        self.primary = Server("floor", proc, wait_for_listener(proc, 60, "floor"), None, "always")

    def _stand_in(self, secret: str, fsync: bool) -> Server:
        """``standby_standin.py`` following the primary (fsyncing a file in its own directory)."""
        self.dirs.append(tempfile.mkdtemp(prefix="standby-bench-stand-in-", dir="/var/tmp"))
        sync = ["--fsync", os.path.join(self.dirs[-1], "stream")] if fsync else []
        args = [*self.cmd[:1], os.path.join(HERE, "standby_standin.py"), str(self.primary.port), secret, *sync]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, env=self.env)
        return Server("stand-in", proc, 0, None, "always")

    def stats(self, srv: Server) -> dict[str, object]:
        with stalkd.Client(f"127.0.0.1:{srv.port}") as c:
            return dict(c.stats())

    def wait_following(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.stats(self.primary).get("standbys") == 1:
                    return
            except (OSError, errors.ClientConnectionError):
                pass
            time.sleep(0.05)
        raise RuntimeError("the standby never connected")

    def run(self, work: str, depth: int, counts: bool = False) -> Run:
        """One run of a cell on this pair's primary, with the standby's CPU over the same span
        (``counts``: and what each asked of the kernel, per job)."""
        srvs = [self.primary] if self.standby is None else [self.primary, self.standby]
        meters = [_PerfStat(srv.proc.pid) for srv in srvs] if counts else []
        before = [srv.sched() for srv in srvs]
        marks: list[_Mark] = []
        self.primary.on_mark = lambda: marks.append(self._mark())  # the cell's start and end
        try:
            rate, cpu, gen = sb.run_cell(self.primary, work, 100, CONNS, depth)
        finally:
            self.primary.on_mark = None
        (p_on, p_wait), *sby = [tuple(b - a for a, b in zip(a0, srv.sched(), strict=True))
                                for a0, srv in zip(before, srvs, strict=True)]
        s_on, s_wait = sby[0] if sby else (0.0, 0.0)
        run = Run(rate, cpu, s_on, p_wait / p_on if p_on else 0.0, s_wait / s_on if s_on else 0.0)
        run.gen_cpu = gen
        if len(marks) == 2:
            run.budget = _budget(marks[0], marks[1], rate)
        jobs = rate * sb.SECONDS
        for who, m in zip(("p", "sb"), meters, strict=False):
            for col, n in m.stop().items():
                run.counts[f"{who} {col}"] = n / jobs if jobs else 0.0
        return run

    def _mark(self) -> _Mark:
        """What ``--budget`` reads at the cell's start and end."""
        sby = self.standby
        live = sby is not None and sby.proc.poll() is None
        return _Mark(time.time(), _machine_ticks(), self.primary.user_sys(),
                     sby.user_sys() if sby is not None and live else (0.0, 0.0), self.probe(),
                     self.primary.loop_sched(), sby.loop_sched() if sby is not None and live else (0.0, 0.0))  # fmt: skip

    def stop(self) -> None:
        for srv in (self.standby, self.primary):
            if srv is not None:
                srv.stop()
        for f in (self.primary.proc.stdin, self.primary.proc.stdout):
            if f is not None:
                f.close()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)


def _machine_ticks() -> tuple[int, int]:
    """(busy, idle) clock ticks of the whole machine since boot (/proc/stat: idle and iowait
    are idle; steal is not counted at all)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    busy = sum(v[:8]) - idle - v[7]
    return busy, idle


class _Mark:
    __slots__ = ("t", "machine", "primary", "standby", "probe", "p_loop", "sb_loop")

    def __init__(self, t: float, machine: tuple[int, int], primary: tuple[float, float],
                 standby: tuple[float, float], probe: tuple[int, int, int], p_loop: tuple[float, float],
                 sb_loop: tuple[float, float]) -> None:  # fmt: skip
        self.t, self.machine, self.primary, self.standby, self.probe = t, machine, primary, standby, probe
        self.p_loop, self.sb_loop = p_loop, sb_loop


def _budget(a: _Mark, b: _Mark, rate: float) -> dict[str, float]:
    """A cell's CPU budget between two marks: per job (us) the primary's user and system time,
    the standby's; the machine's busy and idle cores; the primary's WAL batches, fsyncs and
    messages to standbys per job (``PROBING``)."""
    wall = b.t - a.t
    jobs = rate * wall
    if wall <= 0 or jobs <= 0:
        return {}
    out = {"p usr": 1e6 * (b.primary[0] - a.primary[0]) / jobs, "p sys": 1e6 * (b.primary[1] - a.primary[1]) / jobs,
           "sb usr": 1e6 * (b.standby[0] - a.standby[0]) / jobs, "sb sys": 1e6 * (b.standby[1] - a.standby[1]) / jobs,
           "busy": (b.machine[0] - a.machine[0]) / sb.TICKS / wall, "idle": (b.machine[1] - a.machine[1]) / sb.TICKS / wall}  # fmt: skip
    # the event loops' threads: shares of the wall time on a CPU and waiting for one; the rest
    # they slept (in epoll, or for the GIL): waiting for the peer, the disk or the clients
    for who, x, y in (("p", a.p_loop, b.p_loop), ("sb", a.sb_loop, b.sb_loop)):
        out[f"{who} loop on"] = (y[0] - x[0]) / wall
        out[f"{who} loop wait"] = (y[1] - x[1]) / wall
    if b.probe[0]:
        out["batches"] = (b.probe[0] - a.probe[0]) / jobs
        out["fsyncs"] = (b.probe[1] - a.probe[1]) / jobs
        out["msgs"] = (b.probe[2] - a.probe[2]) / jobs
    return out


def _paired(runs: list[Run], alone: list[Run]) -> str:
    """Each round's ratio to the primary alone *in that round* (a round runs every setup back to
    back), their median and quartiles: on a shared machine a slow minute moves both figures of a
    round, and the ratio of the medians can pair a fast alone with a slow standby."""
    rs = [r.rate / a.rate for r, a in zip(runs, alone, strict=True) if a.rate]
    return targets.spread(rs) if rs else "-"


# (sendto: the standby's committer thread sends its acknowledgements, receiver._thread_ack)
_TRACED = ("write", "writev", "read", "pwrite64", "fdatasync", "sendto")


def trace_sync(pair: Pair, work: str, depth: int) -> str:
    """One more run of the cell on a sync pair with ``perf record`` on the primary's and the
    standby's system calls (``--trace``): the median (and 90th percentile) of each step from the
    primary's send of a batch to the acknowledgement that covers it, against its own fsync."""
    assert pair.standby is not None
    pids = (pair.primary.proc.pid, pair.standby.proc.pid)
    # (sched_switch: recorded when one of the two leaves a CPU)
    run, text = perf_script(pids, _TRACED, lambda: pair.run(work, depth), ["sched:sched_switch"])
    return f"{run.rate:.0f} jobs/s traced; " + _critical_path(text, *pids)


def _critical_path(text: str, ppid: int, spid: int) -> str:
    """``trace_sync``'s figures from ``perf script`` output (see there)."""
    import bisect
    import re

    line_re = re.compile(r"\s*(\d+)/(\d+)\s+([\d.]+):\s+syscalls:sys_(enter|exit)_(\w+):\s*(.*)")
    switch_re = re.compile(r"\s*(\d+)/(\d+)\s+([\d.]+):\s+sched:sched_switch:.*prev_state=(\S+)")
    fd_re, count_re = re.compile(r"fd: 0x([0-9a-f]+)"), re.compile(r"(?:count|len): 0x([0-9a-f]+)")
    pos_re = re.compile(r"pos: 0x([0-9a-f]+)")
    # (time, the end of the WAL write in its segment file, the WAL write's time): the standby
    # lays the same frames at the same positions, and may append several messages at once
    sends: list[tuple[float, int, float]] = []
    p_sync: list[tuple[float, float]] = []  # the primary's fsyncs (start, end)
    s_sync: list[tuple[float, float]] = []
    acks_in: list[float] = []  # the primary's reads on its standby's connection
    acks_out: list[float] = []  # the standby's 8-byte writes on its loop thread, and sends on its committer
    client_reads: list[float] = []  # the primary loop's reads of its other connections
    replies: list[float] = []  # the primary loop's writev calls (replies to clients)
    appends: list[tuple[float, int, int]] = []  # the standby's pwrites (time, position, bytes)
    started: dict[int, float] = {}
    wal_write: tuple[float, int, int] | None = None  # (time, bytes, position)
    link = -1
    # the standby's loop thread: when it went to sleep (a switch off a CPU in state S) and when
    # it next made a system call (awake again); the primary loop's fsyncs (start, end)
    s_slept: list[float] = []
    s_calls: list[float] = []
    p_loop_sync: list[tuple[float, float]] = []
    for line in text.splitlines():
        m = line_re.match(line)
        if m is None:
            w = switch_re.match(line)
            if w is not None and int(w[2]) == spid and w[4].startswith("S"):
                s_slept.append(float(w[3]))
            continue
        pid, tid, t, side, call, rest = int(m[1]), int(m[2]), float(m[3]), m[4], m[5], m[6]
        fdm, cm, pm = fd_re.search(rest), count_re.search(rest), pos_re.search(rest)
        fd, count = (int(fdm[1], 16) if fdm else -1), (int(cm[1], 16) if cm else -1)
        pos = int(pm[1], 16) if pm else -1
        if tid == spid:
            s_calls.append(t)
        if call == "fdatasync":
            if side == "enter":
                started[tid] = t
            elif tid in started:
                (p_sync if pid == ppid else s_sync).append((started.pop(tid), t))
                if tid == ppid:
                    p_loop_sync.append(p_sync[-1])
            continue
        if side != "enter":
            continue
        if pid == ppid and tid == ppid:
            if call == "pwrite64":
                wal_write = (t, count, pos)
            elif call == "write" and wal_write is not None and count in (wal_write[1] + 25, wal_write[1] + 4):
                # a frames message (the floor's: the batch behind its length)
                link = fd
                sends.append((t, wal_write[2] + wal_write[1], wal_write[0]))
                wal_write = None
            elif call == "read" and fd == link:
                acks_in.append(t)
            elif call == "read":
                client_reads.append(t)
            elif call == "writev":
                replies.append(t)
        elif pid == spid:
            if call == "pwrite64" and count > 64:  # (not a segment header)
                appends.append((t, pos, count))
            elif count == 8 and (call == "write" and tid == spid or call == "sendto"):
                acks_out.append(t)
    steps: dict[str, list[float]] = {}
    later = 0
    # (send -> append) by whether the standby's loop slept at the send; (ack sent -> read) by
    # whether the primary's loop was in an fsync when the acknowledgement was written
    woke: dict[bool, list[float]] = {True: [], False: []}
    in_sync: dict[bool, list[float]] = {True: [], False: []}
    loop_sync_starts = [a for a, _ in p_loop_sync]
    between: list[int] = []  # client reads by the primary between an ack's write and its read
    release: list[float] = []  # an ack that came after the local fsync: its read -> the next reply
    s_starts = [a for a, _ in s_sync]
    p_starts = [a for a, _ in p_sync]
    for t, end, wrote in sends:
        # the standby's first append after the send that holds the batch's last byte
        i = bisect.bisect_left(appends, (t, -1, 0))
        while i < len(appends) and not appends[i][1] < end <= appends[i][1] + appends[i][2]:
            i += 1
        j = bisect.bisect_left(s_starts, appends[i][0]) if i < len(appends) else len(s_starts)
        k = bisect.bisect_left(p_starts, wrote)
        if j >= len(s_sync) or k >= len(p_sync):
            continue
        ack_w = bisect.bisect_left(acks_out, s_sync[j][1])
        if ack_w >= len(acks_out):
            continue
        ack_r = bisect.bisect_left(acks_in, acks_out[ack_w])
        if ack_r >= len(acks_in):
            continue
        got = acks_in[ack_r]
        local = p_sync[k][1]
        later += got > local
        between.append(bisect.bisect_left(client_reads, got) - bisect.bisect_left(client_reads, acks_out[ack_w]))
        r = bisect.bisect_left(replies, got)
        if got > local and r < len(replies):
            release.append(replies[r] - got)
        sl = bisect.bisect_right(s_slept, t) - 1
        asleep = sl >= 0 and bisect.bisect_right(s_calls, s_slept[sl]) == bisect.bisect_right(s_calls, t)
        woke[asleep].append(appends[i][0] - t)
        a = acks_out[ack_w]
        q = bisect.bisect_right(loop_sync_starts, a) - 1
        in_sync[q >= 0 and p_loop_sync[q][1] > a].append(got - a)
        for name, v in (("send->standby append", appends[i][0] - t), ("append->its fsync", s_sync[j][0] - appends[i][0]),
                        ("standby fsync", s_sync[j][1] - s_sync[j][0]), ("fsync->ack sent", acks_out[ack_w] - s_sync[j][1]),
                        ("ack sent->read", got - acks_out[ack_w]), ("send->ack read", got - t),
                        ("WAL write->local fsync done", local - wrote)):  # fmt: skip
            steps.setdefault(name, []).append(v)
    n = len(steps.get("send->ack read", ()))
    if not n:
        return "no batch matched (the primary sent none, or the trace lost events)"
    # (the means of the first five steps add up to the mean send->ack read; medians do not)
    fmt = ", ".join(f"{k} {1e3 * statistics.median(v):.2f}/{1e3 * statistics.fmean(v):.2f} "
                    f"({1e3 * sorted(v)[int(0.9 * len(v))]:.2f})" for k, v in steps.items())  # fmt: skip
    out = (f"{n} of {len(sends)} batches matched; ms, median/mean (90th percentile): {fmt}; the acknowledgement "
           f"came after the local fsync for {later / n:.0%} of them; between an acknowledgement's write and its "
           f"read the primary read {statistics.fmean(between):.1f} client connections on average (none for "
           f"{sum(1 for b in between if not b) / n:.0%})")
    if release:
        out += f"; its read -> the first reply written {1e3 * statistics.median(release):.2f} ms (median)"

    def _split(d: dict[bool, list[float]], yes: str, no: str) -> str:
        return "; ".join(f"{label} for {len(v) / n:.0%} ({1e3 * statistics.median(v):.2f} ms median)"
                         for label, v in ((yes, d[True]), (no, d[False])) if v)  # fmt: skip

    out += (f"; send -> append: the standby's loop {_split(woke, 'asleep', 'busy')}; ack sent -> read: the "
            f"primary's loop {_split(in_sync, 'in an fsync', 'not in one')}")
    return out


class _PerfStat:
    """``perf stat`` attached to a process (all its threads) until ``stop``: the ``COUNTS``."""

    def __init__(self, pid: int) -> None:
        events = ",".join(e for e, _ in COUNTS)
        self.proc = subprocess.Popen(["perf", "stat", "-x", ",", "-e", events, "-p", str(pid)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(0.1)  # attached before the cell's generator starts (it waits 0.3 s itself)

    def stop(self) -> dict[str, float]:
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        names = dict(COUNTS)
        out: dict[str, float] = {}
        for line in err.splitlines():  # value,unit,event,...
            f = line.split(",")
            if len(f) > 2 and f[2] in names and f[0].replace(".", "", 1).isdigit():
                out[names[f[2]]] = float(f[0])
        return out


class Run:
    """One cell's run on one pair: jobs/s, the primary's CPU (% of a core over the run) and the
    standby's CPU seconds over it (the generator's wait for its start included); the primary's
    and the standby's *starvation*: seconds runnable but waiting for a CPU, per second on one
    (0: never waited; 2: it waited twice as long as it ran)."""

    __slots__ = ("rate", "cpu", "standby_cpu", "primary_starved", "standby_starved", "counts", "gen_cpu", "budget")

    def __init__(self, rate: float, cpu: float, standby_cpu: float, primary_starved: float = 0.0,
                 standby_starved: float = 0.0) -> None:  # fmt: skip
        self.rate, self.cpu, self.standby_cpu = rate, cpu, standby_cpu
        self.primary_starved, self.standby_starved = primary_starved, standby_starved
        self.counts: dict[str, float] = {}  # --counts: "p sys", "sb futex"... per job
        self.gen_cpu = 0.0  # the load generators' CPU, % of a core over the run
        self.budget: dict[str, float] = {}  # --budget: _budget's figures

    @property
    def us_per_job(self) -> float:
        """The primary's CPU microseconds per acknowledged job."""
        return 1e4 * self.cpu / self.rate if self.rate else float("nan")


def _median_run(runs: list[Run]) -> Run:
    """The run of median throughput for the rate; CPU per job is its own median (a separate
    figure: one slow round moves the two differently)."""
    by_rate = sorted(runs, key=lambda r: r.rate)[len(runs) // 2]
    us = statistics.median(r.us_per_job for r in runs)
    med = Run(by_rate.rate, us * by_rate.rate / 1e4, by_rate.standby_cpu,
              statistics.median(r.primary_starved for r in runs), statistics.median(r.standby_starved for r in runs))
    for key in runs[0].counts:
        med.counts[key] = statistics.median(r.counts.get(key, 0.0) for r in runs)
    med.gen_cpu = statistics.median(r.gen_cpu / r.rate if r.rate else 0.0 for r in runs) * by_rate.rate
    for key in runs[0].budget:
        med.budget[key] = statistics.median(r.budget.get(key, 0.0) for r in runs)
    return med


def _shares(b: dict[str, float], who: str) -> str:
    on, wait = b.get(f"{who} loop on", 0), b.get(f"{who} loop wait", 0)
    return f"{on:.0%}/{wait:.0%}/{max(0.0, 1 - on - wait):.0%}"


def _budget_line(setup: str, run: Run) -> str:
    """A setup's --budget: where a job's CPU goes on the machine, and how the primary batched."""
    b = run.budget
    gen = 1e4 * run.gen_cpu / run.rate if run.rate else 0.0
    line = (f"#     {setup:15} us/job: primary usr {b.get('p usr', 0):.1f} sys {b.get('p sys', 0):.1f}, "
            f"standby usr {b.get('sb usr', 0):.1f} sys {b.get('sb sys', 0):.1f}, generators {gen:.1f}; "
            f"machine busy {b.get('busy', 0):.2f} idle {b.get('idle', 0):.2f} cores; event loop on a CPU/waiting "
            f"for one/asleep: primary " + _shares(b, "p"))
    if b.get("sb loop on", 0):
        line += ", standby " + _shares(b, "sb")
    if "batches" in b:
        per = b["batches"]
        line += (f"; per job: batches {per:.4f} (jobs/batch {1 / per if per else 0:.0f}) fsyncs {b['fsyncs']:.4f} "
                 f"msgs {b['msgs']:.4f}")
    return line


def _counts_line(setup: str, run: Run) -> str:
    """A setup's --counts per job; the standby's appends as jobs per append (records a message)."""
    c = dict(run.counts)
    appends = c.pop("sb pwrite", 0.0)
    c.pop("p pwrite", None)
    per_append = f" jobs/append {1 / appends:.1f}" if appends else ""
    return f"#     {setup:15} per job: " + " ".join(f"{k} {v:.3f}" for k, v in c.items()) + per_append


def _lag_sampler(pair: Pair, stop: threading.Event, out: list[int]) -> None:
    """The async pair's standby lag every ``LAG_EVERY`` s, on one connection (a connection per
    reading cost its primary ~170 us of CPU each, charged to the async setup's CPU per job)."""
    while not stop.is_set():
        with contextlib.suppress(OSError, errors.ClientConnectionError), \
                stalkd.Client(f"127.0.0.1:{pair.primary.port}") as c:  # fmt: skip
            while not stop.is_set():
                out.append(int(c.stats().get("standby-lag", 0)))
                stop.wait(LAG_EVERY)
        stop.wait(LAG_EVERY)


def promote_to_put(pair: Pair) -> float:
    """Seconds from SIGUSR2 to the standby's first INSERTED (the primary is killed first)."""
    assert pair.standby is not None
    pair.primary.proc.kill()
    pair.primary.proc.wait()
    port = pair.standby.port
    with socket.create_connection(("127.0.0.1", port)) as s:
        t0 = time.perf_counter()
        pair.standby.proc.send_signal(signal.SIGUSR2)
        while True:
            s.sendall(b"put 0 0 60 1\r\nx\r\n")
            reply = s.recv(100)
            if reply.startswith(b"INSERTED"):
                return time.perf_counter() - t0


def _parse_cells(text: str) -> list[tuple[str, int]]:
    cells = []
    for item in text.split(","):
        work, _, depth = item.partition(":")
        if work not in ("put", "rd") or not depth.isdigit():
            raise argparse.ArgumentTypeError(f"a cell is put:DEPTH or rd:DEPTH, not {item!r}")
        cells.append((work, int(depth)))
    return cells


def main() -> int:
    global BASELINE, SETUPS, CELLS, PROBING, CONNS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-src", metavar="DIR", default=BASELINE,
                    help="the src/ of an earlier checkout: also run its alone, async and sync setups")
    ap.add_argument("--cells", type=_parse_cells, metavar="WORK:DEPTH,...",
                    help="the cells to run (default put:1,put:64,rd:1,rd:64)")
    ap.add_argument("--conns", type=int, default=CONNS, metavar="N",
                    help=f"connections per cell (default {CONNS}): fewer in flight, a lower rate for the same "
                    "setup (the primary's CPU per job alone at the rate a sync pair reaches)")
    ap.add_argument("--stand-in", action="store_true",
                    help="also run the primary with a stand-in standby (streams and checks, keeps nothing)")
    ap.add_argument("--floor", action="store_true",
                    help="also run the floor server (floor_server.py --group) alone, with an async and with a "
                    "sync floor standby: the ratios the least a Python primary reaches on this machine")
    ap.add_argument("--no-promote", action="store_true", help="skip the promotion timing at the end")
    ap.add_argument("--counts", action="store_true",
                    help="also count, per job, each process's system calls, context switches, futex calls, "
                    "fdatasyncs and the standby's appends (perf stat; load-independent, unlike time)")
    ap.add_argument("--budget", action="store_true",
                    help="also print each cell's CPU budget per job (the primary's and the standby's user and "
                    "system time, the generators'), the machine's busy and idle cores, and the primary's WAL "
                    "batches, fsyncs and messages to standbys per job (the primary runs through "
                    "standby_counts.PROBE)")
    ap.add_argument("--trace", action="store_true",
                    help="also run each cell once more on each sync pair under perf record (system calls) and "
                    "print the steps (median/mean, p90) from the primary's send of a batch to the acknowledgement covering it, "
                    "against the primary's own fsync: which one a reply waits for")
    ap.add_argument("--records-standby", action="store_true",
                    help="also run this checkout's primary with the --peer-src build's standby, which "
                    "does not ask for frames messages (the records path an older standby gets)")
    ap.add_argument("--ha", action="store_true", help="automatic failover instead (bench/ha_bench.py): "
                    "the lease's cost and kill -9 -> first put on the new primary")
    opts = ap.parse_args()
    if opts.ha:
        import ha_bench

        return ha_bench.main()
    if opts.trace and shutil.which("perf") is None:
        ap.error("--trace records the servers' system calls with perf: install perf (linux-perf)")
    if opts.counts and shutil.which("perf") is None:
        ap.error("--counts attaches perf stat to the servers: install perf (linux-perf), or leave --counts out")
    BASELINE = opts.peer_src
    PROBING = opts.budget
    CONNS = opts.conns
    if opts.cells:
        CELLS = opts.cells
    sides = [("", ("alone", "async", "sync"))]
    if BASELINE:
        SETUPS = (*SETUPS, *PEER_SETUPS)
        sides.append(("before ", PEER_SETUPS))
    if opts.records_standby:
        if not BASELINE:
            ap.error("--records-standby runs the standby of --peer-src DIR: give it")
        SETUPS = (*SETUPS, *RECORDS_SETUPS)
        sides.append(("R-path ", ("alone", *RECORDS_SETUPS)))
    if opts.stand_in:
        SETUPS = (*SETUPS, *STAND_IN_SETUPS)
        sides.append(("stand-in ", ("alone", "stand-in-async", "stand-in-sync")))
        sides.append(("no fsync ", ("alone", "stand-in-async", "stand-in-ack-sync")))
    if opts.floor:
        SETUPS = (*SETUPS, *FLOOR_SETUPS)
        sides.append(("floor ", FLOOR_SETUPS))
    print(f"# standby_bench: {CONNS} connections, {sb.SECONDS:.1f} s per cell, {sb.ROUNDS} rounds, "
          f"{sb.GEN_PROCS} generator processes, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    if BASELINE:
        print(f"# before: base-alone, base-async, base-sync run {BASELINE}; after: this checkout")
    print("# us/job: the primary's CPU microseconds per acknowledged job (median of rounds); "
          "sb us: the standby's, roughly (its CPU over the run, lead-in and preload included)")
    pairs = {s: Pair(s) for s in SETUPS}
    lags: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_lag_sampler, args=(pairs["async"], stop, lags), daemon=True)
    ratios: dict[str, list[float]] = {}
    try:
        sampler.start()
        print(f"{'':9}{'work':4} {'depth':>5} | {'alone/s':>8} {'us/job':>6} | {'async/s':>8} {'ratio':>5} "
              f"{'us/job':>6} {'ratio':>5} {'sb us':>5} | {'sync/s':>8} {'ratio':>5} {'us/job':>6} {'ratio':>5} "
              f"{'sb us':>5}")
        for work, depth in CELLS:
            runs: dict[str, list[Run]] = {s: [] for s in SETUPS}
            for r in range(sb.ROUNDS):
                k = r % len(SETUPS)
                order = SETUPS[k:] + SETUPS[:k]  # rotate who goes first
                for setup in order:
                    runs[setup].append(pairs[setup].run(work, depth, opts.counts))
            med = {s: _median_run(runs[s]) for s in SETUPS}
            for label, (alone, asy, syn) in sides:
                a, x, y = med[alone], med[asy], med[syn]
                row = f"{label or 'after ':9}{work:4} {depth:5} | {a.rate:8.0f} {a.us_per_job:6.1f}"
                for name, m in (("async", x), ("sync", y)):
                    rr, cr = m.rate / a.rate, m.us_per_job / a.us_per_job
                    ratios.setdefault(f"{label}{name} throughput", []).append(rr)
                    ratios.setdefault(f"{label}{name} cpu/job", []).append(cr)
                    sb_us = 1e6 * m.standby_cpu / (m.rate * sb.SECONDS) if m.rate else 0.0
                    row += f" | {m.rate:8.0f} {rr:4.2f}x {m.us_per_job:6.1f} {cr:4.2f}x {sb_us:5.1f}"
                print(row, flush=True)
            for label, (alone, asy, syn) in sides:
                print(f"#   {work}:{depth} {label or 'after '}throughput / alone in the same round (median, "
                      f"quartiles): async {_paired(runs[asy], runs[alone])}, sync {_paired(runs[syn], runs[alone])}",
                      flush=True)  # fmt: skip
            starved = "; ".join(f"{s}: primary {med[s].primary_starved:.2f}"
                                + (f", standby {med[s].standby_starved:.2f}" if "alone" not in s else "")
                                for s in SETUPS)  # fmt: skip
            print(f"#   {work}:{depth} waiting for a CPU, s per s on one: {starved}", flush=True)
            if opts.budget:
                print(f"#   {work}:{depth} budget (user/system from clock ticks; medians of the rounds):")
                for s in SETUPS:
                    print(_budget_line(s, med[s]), flush=True)
            if opts.trace:
                for s in SETUPS:
                    if s.endswith("sync") and not s.startswith("stand-in") and "async" not in s:
                        print(f"#   {work}:{depth} {s} critical path: {trace_sync(pairs[s], work, depth)}", flush=True)
            if opts.counts:
                print(f"#   {work}:{depth} counts (p: the primary, sb: the standby; medians of the rounds):")
                for s in SETUPS:
                    print(_counts_line(s, med[s]), flush=True)
        stop.set()
        sampler.join()
        print(f"# async standby lag while loaded: max {max(lags, default=0)} records, "
              f"median {statistics.median(lags) if lags else 0:.0f} ({len(lags)} samples)")
        if not opts.no_promote:
            for setup in ("async", "sync"):
                print(f"# {setup}: promote (SIGUSR2) -> first INSERTED: {1000 * promote_to_put(pairs[setup]):.0f} ms")
        for name, rs in ratios.items():
            print(f"# {name} / alone: geometric mean {statistics.geometric_mean(rs):.2f}x, "
                  f"min {min(rs):.2f}x, max {max(rs):.2f}x")
    finally:
        stop.set()
        for p in pairs.values():
            p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
