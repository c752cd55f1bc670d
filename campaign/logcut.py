"""Power loss for the embedded log (``stalkd.Log``) and its consumer-group cursors.

A child process opens a log on a :mod:`campaign.powerfs` mount and loops: append a batch
(``append_many``: acknowledged once it returns, durable under the policy), poll the group
``g``, ack a random subset of what it got (cursor writes: in order, out of order, acked ranges).
It prints each step on stdout, which the parent timestamps as the history:

    W RUN FIRST LAST        it is about to append payloads RUN-FIRST .. RUN-LAST
    A OFFSET RUN-N K        the batch is acknowledged: OFFSET.. holds RUN-N .. RUN-(N+K-1)
    D OFF:PAYLOAD,...       the group delivered these records
    K OFF,...               ... and these acks returned

The parent kills the child (``kill -9``) or cuts the power at random moments, starts a new
child on what is left (a log that will not open is a restart failure; the run then opens it
with ``repair=True``), and at the end reads the log and polls the group once more. The rules
(same window as :mod:`campaign.powercut`): an acknowledged append's record is there, with its
payload, or the group delivered it; an acknowledged ack is not delivered again; nothing
delivered or read that no child meant to append. Under ``every:MS`` and ``never`` a group
writes its cursor checkpoint at most MS (100 ms under never) after an ack, without waiting for
the disk, so there a plain ``kill -9`` may also undo the acks of that last stretch (at-least-once
delivery, as the group's docstring says); the judge allows it that interval plus the slack.

``python -m campaign.logcut --faults 40`` prints the table.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from campaign.powercut import in_window, progress, summary, window_of
from campaign.powerfs import PowerFS, log_tail

__all__ = ["LogCounts", "check", "child", "run"]

SEGMENT = 16384  # small segments: a roll every ~hundred records


@dataclass
class LogCounts:
    policy: str = ""
    cuts: int = 0
    kills: int = 0
    appended: int = 0  # records whose append was acknowledged
    acked: int = 0  # group acks acknowledged
    lost: int = 0  # acknowledged records gone (not allowed by the policy)
    lost_in_window: int = 0
    redelivered: int = 0  # acknowledged acks delivered again (not allowed)
    redelivered_in_window: int = 0
    invented: int = 0
    restart_failures: int = 0
    details: list[str] = field(default_factory=list)


HEADER = ["policy", "power cuts", "kill -9", "appended", "acked", "lost", "lost (in window)",
          "acks undone", "acks undone (in window)", "invented", "restart failures"]


def row(c: LogCounts) -> list[str]:
    return [c.policy, *(str(x) for x in (c.cuts, c.kills, c.appended, c.acked, c.lost, c.lost_in_window,
                                          c.redelivered, c.redelivered_in_window, c.invented,
                                          c.restart_failures))]


# -- the child --------------------------------------------------------------------------------

def child(path: str, policy: str, run_id: int, seed: int, repair: bool) -> None:
    from stalkd.log import Log

    rng = random.Random(seed)
    out = sys.stdout
    log = Log.open(path, segment_size=SEGMENT, durability=policy, repair=repair)
    g = log.group("g")
    n = 0
    while True:
        k = rng.randint(1, 12)
        out.write(f"W {run_id} {n} {n + k - 1}\n")
        out.flush()
        first, _ = log.append_many([f"{run_id}-{n + i}-".encode() + b"x" * rng.randrange(200)
                                    for i in range(k)])
        out.write(f"A {first} {run_id}-{n} {k}\n")
        out.flush()
        n += k
        msgs = g.poll(rng.randint(1, 30))
        if not msgs:
            continue
        out.write("D " + ",".join(f"{m.offset}:{_name(m.bytes())}" for m in msgs) + "\n")
        out.flush()
        acks = sorted(rng.sample(msgs, rng.randint(0, len(msgs))), key=lambda m: m.offset)
        if rng.random() < 0.5:  # mostly in order: the committed head moves, not only ranges
            acks = msgs[: rng.randint(0, len(msgs))]
        if acks:
            g.ack(*acks)
            out.write("K " + ",".join(str(m.offset) for m in acks) + "\n")
            out.flush()


def _name(payload: bytes) -> str:
    """A record's name: its payload up to the padding (``RUN-N``)."""
    return payload.split(b"-x", 1)[0].rstrip(b"-").decode(errors="replace")


# -- the parent -------------------------------------------------------------------------------

class History:
    """The children's lines, each with the time it was read, and the faults."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.lines: list[tuple[float, str]] = []
        self.cuts: list[tuple[float, float]] = []  # (start, end) of each power cut
        self.kills: list[tuple[float, float]] = []  # (start, end) of each plain kill -9
        self.restart_failures: list[str] = []
        self.final: dict[int, str] = {}  # offset -> record name, read after the run
        self.final_delivered: dict[int, str] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def reader(self, proc: subprocess.Popen[str]) -> threading.Thread:
        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.endswith("\n"):
                    with self._lock:
                        self.lines.append((self.now(), line.rstrip("\n")))

        t = threading.Thread(target=read, daemon=True)
        t.start()
        return t


def check(h: History, policy: str, slack: float = 1.0) -> LogCounts:
    out = LogCounts(policy=policy, cuts=len(h.cuts), kills=len(h.kills),
                    restart_failures=len(h.restart_failures))
    window = window_of(policy, slack)
    # Cursor checkpoints are throttled under every:MS and never (written at most MS, or 100 ms,
    # after an ack, by design: at-least-once delivery), so there a plain kill -9 may undo the
    # acks of that last stretch too; an ack older than that at the kill must stay acked.
    throttle = 0.0 if policy == "always" else window_of(policy, slack) if policy.startswith("every:") else 0.1 + slack
    intents: dict[str, tuple[int, int]] = {}  # run -> (first, last) n ever intended
    appended: list[tuple[int, str, float]] = []
    delivered: list[tuple[float, int, str]] = []
    acks: list[tuple[float, int, str]] = []
    last_delivery: dict[int, str] = {}
    for t, line in h.lines:
        kind, _, rest = line.partition(" ")
        if kind == "W":
            run_id, a, b = rest.split()
            lo, hi = intents.get(run_id, (int(a), int(b)))
            intents[run_id] = (min(lo, int(a)), max(hi, int(b)))
        elif kind == "A":
            first, name, k = rest.split()
            run_id, n = name.split("-")
            for i in range(int(k)):
                appended.append((int(first) + i, f"{run_id}-{int(n) + i}", t))
        elif kind == "D":
            for item in rest.split(","):
                o, _, nm = item.partition(":")
                delivered.append((t, int(o), nm))
                last_delivery[int(o)] = nm
        elif kind == "K":
            for o in rest.split(","):
                acks.append((t, int(o), last_delivery.get(int(o), "?")))
    out.appended, out.acked = len(appended), len(acks)
    acked_at = {(o, name): t for t, o, name in acks}
    seen = {(o, name) for _, o, name in delivered} | set(h.final_delivered.items())
    for off, name, t in appended:
        if h.final.get(off) == name and (off, name) in seen:
            continue  # there, and the group delivered it (or will)
        why = "not in the log" if h.final.get(off) != name else "never delivered (the cursor skipped it)"
        if in_window(t, t, h.cuts, window):
            out.lost_in_window += 1
        else:
            out.lost += 1
            out.details.append(f"lost: record {name} at offset {off}, acknowledged at {t:.3f}s: {why}")
    counted: set[tuple[int, str]] = set()
    for t, off, name in delivered + [(float("inf"), o, n) for o, n in h.final_delivered.items()]:
        at = acked_at.get((off, name))
        if at is None or t <= at or (off, name) in counted:
            continue
        counted.add((off, name))
        if in_window(at, at, h.cuts, window) or in_window(at, at, h.kills, throttle):
            out.redelivered_in_window += 1
        else:
            out.redelivered += 1
            out.details.append(f"ack undone: record {name} at offset {off} acked at {at:.3f}s, "
                               f"delivered again at {t:.3f}s")
    for off, name in [(o, n) for _, o, n in delivered] + list(h.final.items()):
        run_id, _, n = name.partition("-")
        lo_hi = intents.get(run_id)
        if lo_hi is None or not n.isdigit() or not lo_hi[0] <= int(n) <= lo_hi[1]:
            out.invented += 1
            out.details.append(f"invented: {name!r} at offset {off}")
    return out


def _final_read(path: str, policy: str, h: History) -> None:
    from stalkd.log import Log

    with Log.open(path, segment_size=SEGMENT, durability=policy) as log:
        h.final = {f.offset: _name(bytes(f.payload)) for f in log.read(0)}
        g = log.group("g")
        while msgs := g.poll(1000):
            h.final_delivered.update((m.offset, _name(m.bytes())) for m in msgs)


def run(policy: str = "always", faults: int = 20, cut_share: float = 0.7, seed: int = 1,
        strict: bool = True, work: str | None = None, keep: bool = False,
        min_gap: float = 0.2, max_gap: float = 1.0, ignore_fsync: str = "", stop_at_failure: bool = False) -> LogCounts:
    """One run: ``faults`` faults on a child appending and acking; ``ignore_fsync`` plants a
    bug (the file system drops fsyncs of paths containing it, say ``.cur``: cursor writes).
    ``stop_at_failure``: end the run at the first restart failure, before any repair, keeping
    ``work`` (``backing/durable`` is what the power cut left, ``child.log`` the refusal)."""
    work = work or tempfile.mkdtemp(prefix="logcut-")
    fs = PowerFS(os.path.join(work, "backing"), os.path.join(work, "mnt"), strict=strict,
                 log_path=os.path.join(work, "powerfs.log"), ignore_fsync=ignore_fsync)
    path = os.path.join(fs.mountpoint, "log")
    rng = random.Random(seed)
    h = History()
    errlog = os.path.join(work, "child.log")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc: subprocess.Popen[str] | None = None
    stopped = False

    def start(run_id: int, repair: bool = False) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "campaign.logcut", "--child", path, "--policy", policy,
               "--run-id", str(run_id), "--seed", str(seed * 1000 + run_id)]
        if repair:
            cmd.append("--repair")
        with open(errlog, "a") as err:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        h.reader(p)
        return p

    def kill(p: subprocess.Popen[str]) -> int | None:
        code = p.poll()
        if code is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        return code  # None: it was running (as it should be)

    try:
        fs.start()
        proc = start(0)
        for i in range(faults):
            begin, count = time.monotonic(), len(h.lines)
            gap = rng.uniform(min_gap, max_gap)
            while time.monotonic() - begin < gap or len(h.lines) - count < 5:
                if proc.poll() is not None or time.monotonic() - begin > 60:
                    break
                time.sleep(0.01)
            code = kill(proc)
            if code is not None:  # it died by itself: a log it could not open, or worse
                h.restart_failures.append(log_tail(errlog))
                if stop_at_failure:
                    keep = stopped = True
                    print(f"restart failure: kept {work}", file=sys.stderr)
                    break
                proc = start(i + 1, repair=True)
                continue
            if rng.random() < cut_share:
                start_t = h.now()
                fs.cut()
                h.cuts.append((start_t, h.now()))
            else:
                h.kills.append((h.now(), h.now()))
            proc = start(i + 1)
        else:
            time.sleep(min_gap)
            h.kills.append((h.now(), h.now()))
            if kill(proc) is not None:
                h.restart_failures.append(log_tail(errlog))
            proc = None
            _final_read(path, policy, h)
    finally:
        if proc is not None:
            kill(proc)
        fs.kill()
        with open(os.path.join(work, "history.txt"), "w") as out:
            out.writelines(f"{t:.6f} {line}\n" for t, line in h.lines)
            out.writelines(f"{a:.6f} CUT {b:.6f}\n" for a, b in h.cuts)
            out.writelines(f"{a:.6f} KILL\n" for a, _ in h.kills)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    if stopped:  # no final read: only the failure is judged
        return LogCounts(policy=policy, cuts=len(h.cuts), kills=len(h.kills), restart_failures=1,
                         details=[f"restart failure (kept in {work}):\n{h.restart_failures[0]}"])
    return check(h, policy)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m campaign.logcut", description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", action="append", help="durability (repeatable; default always, every:50, never)")
    ap.add_argument("--faults", type=int, default=40)
    ap.add_argument("--cut-share", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--table", help="also write the table (markdown) to this file")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--stop-at-first-failure", action="store_true",
                    help="end a run at its first restart failure, before the repair, keeping its "
                    "directory (printed): backing/durable as the cut left it, child.log")
    ap.add_argument("--plant-ignore-fsync", metavar="TEXT", default="",
                    help="planted bug: the file system drops fsyncs of paths containing TEXT")
    ap.add_argument("--child", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--run-id", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--repair", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, (args.policy or ["always"])[0], args.run_id, args.seed, args.repair)
        return 0
    rows: list[LogCounts] = []
    for policy in args.policy or ["always", "every:50", "never"]:
        rows.append(run(policy, args.faults, args.cut_share, args.seed, keep=args.keep,
                        ignore_fsync=args.plant_ignore_fsync, stop_at_failure=args.stop_at_first_failure))
        progress(HEADER, row(rows[-1]), rows[-1].details)
    summary(HEADER, [row(r) for r in rows], args.table)
    return 1 if any(r.lost or r.invented or r.redelivered or r.restart_failures for r in rows) else 0

if __name__ == "__main__":
    sys.exit(main())
