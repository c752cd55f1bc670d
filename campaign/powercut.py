"""Power loss for one node: stalkd on a :mod:`campaign.powerfs` mount, killed and cut at random.

A run: a PowerFS mount (strict: directory entries durable only once their directory is
fsynced), ``stalkd serve --dir MOUNT/data`` on a UNIX socket with small WAL segments (so
segment rolls and compaction snapshots happen every few hundred jobs), producers putting unique
bodies and workers reserving and deleting, every operation and reply recorded. The nemesis, at
random moments, either ``kill -9``s the server (the page cache survives: nothing acknowledged
may be lost under any policy) or cuts the power (``kill -9`` of the server, then of the file
system: only what was fsynced survives), and restarts the server on what is left. A server that
does not come back by itself is a *restart failure*; the run then repairs (``--repair``) to go on.

At the end a final read drains the queue, and :func:`check` judges the history against the
policy's promise (docs/architecture.md, "What a reply promises"):

  * ``always``: nothing acknowledged is lost or resurrected, across every cut;
  * ``every:MS``: what is lost (a put, or a delete, whose job then comes back) was acknowledged
    at most the window (MS plus the fsync's own time, ``slack``) before a power cut;
  * ``never``: anything acknowledged since the last fsync the log did on its own (segment
    rolls, snapshots) may be lost at a cut, so only kills count against it;
  * any policy: nothing invented, no acknowledged loss across a plain ``kill -9``, and the
    server restarts by itself.

``python -m campaign.powercut --cuts 200`` prints the table (and writes it with ``--table``).

The events have campaign.history's fields (``p``, ``type``, ``f``, ``t``, ``value``), but the
recorder and the rules here stay this module's own: under ``every:MS`` and ``never`` a power cut
hands the ids of lost puts to new jobs (docs/reliability.md), so loss is judged by body here,
where ``campaign.checker``'s ``lost`` rule, keyed by id, would count a lost put whose id a later
job took as present. The power cut of a primary and its standby together, judged under
``always`` only, records through ``campaign.history`` and ``campaign.checker``
(:mod:`campaign.pairloss`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from campaign.powerfs import PowerFS, log_tail

__all__ = ["Counts", "Run", "check", "in_window", "main", "run"]

TUBE = "powercut"
NEMESIS = "nemesis"


# -- the history ------------------------------------------------------------------------------

class History:
    """Events with campaign.history's fields (see above), thread-safe, in memory."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []

    def now(self) -> float:
        return time.monotonic() - self._t0

    def add(self, process: str, type_: str, f: str, value: dict[str, Any]) -> float:
        with self._lock:
            t = self.now()
            self.events.append({"p": process, "type": type_, "f": f, "t": round(t, 6), "value": value})
            return t

    def write(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as out:
            for ev in self.events:
                out.write(json.dumps(ev, separators=(",", ":"), sort_keys=True) + "\n")


# -- the checker ------------------------------------------------------------------------------

@dataclass
class Counts:
    """One run's row of the table."""

    policy: str = ""
    data_dir: str = "fresh"
    faults: int = 0
    cuts: int = 0
    kills: int = 0
    ops: int = 0
    acknowledged: int = 0
    lost: int = 0  # acknowledged, gone, and not allowed by the policy
    lost_in_window: int = 0  # acknowledged and gone within what the policy allows
    invented: int = 0
    resurrected: int = 0  # a deleted job back, not allowed by the policy
    resurrected_in_window: int = 0
    reused_ids: int = 0  # one id acknowledged for two puts
    restart_failures: int = 0
    details: list[str] = field(default_factory=list)

    def row(self) -> list[str]:
        return [self.policy, self.data_dir, str(self.cuts), str(self.kills), str(self.ops),
                str(self.acknowledged), str(self.lost), str(self.lost_in_window), str(self.invented),
                str(self.resurrected), str(self.resurrected_in_window), str(self.reused_ids),
                str(self.restart_failures)]


HEADER = ["policy", "data dir", "power cuts", "kill -9", "ops", "acknowledged", "lost",
          "lost (in window)", "invented", "resurrected", "resurrected (in window)",
          "reused ids", "restart failures"]


def window_of(policy: str, slack: float) -> float:
    """How long before a power cut an acknowledged change may be lost under ``policy``."""
    if policy == "always":
        return 0.0
    if policy.startswith("every:"):
        return int(policy.split(":", 1)[1]) / 1000.0 + slack
    return float("inf")  # never: since the log's last fsync of its own, however long ago


def in_window(invoked: float, completed: float, cuts: list[tuple[float, float]], window: float) -> bool:
    """Whether a change sent at ``invoked`` and acknowledged by ``completed`` may be lost: the
    server acknowledged it at some moment in between, and a power cut (start, end) followed
    within ``window`` seconds of that moment. A plain kill -9 loses nothing, so only cuts
    count; and with no window (``always``) nothing acknowledged may be lost at all."""
    if window <= 0:
        return False
    after = [c for c in cuts if c[1] >= invoked]
    return bool(after) and completed >= after[0][0] - window


def _cuts(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) of each power cut: from the kill of the server to the mount back."""
    starts = [e["t"] for e in events if e["p"] == NEMESIS and e["f"] == "cut" and e["type"] == "invoke"]
    ends = [e["t"] for e in events if e["p"] == NEMESIS and e["f"] == "cut" and e["type"] == "ok"]
    return list(zip(starts, ends + [float("inf")] * (len(starts) - len(ends)), strict=True))


def check(events: list[dict[str, Any]], policy: str, slack: float = 1.0) -> Counts:
    """The row for a history: the anomalies by kind, each judged against the policy's window."""
    out = Counts(policy=policy)
    window = window_of(policy, slack)
    cuts = _cuts(events)
    open_: dict[str, dict[str, Any]] = {}
    put_ok: dict[str, tuple[int, float, float]] = {}  # body -> (id, sent at, acknowledged at)
    bodies: set[str] = set()  # every body any put carried (whatever its outcome)
    deleted_ok: dict[str, tuple[float, float]] = {}  # body -> its first acknowledged delete (sent, acked)
    maybe_deleted: set[str] = set()
    seen: list[tuple[int, str, float, str]] = []  # (id, body, reserve sent at, where)
    final: dict[str, int] | None = None  # body -> id
    for e in events:
        if e["p"] == NEMESIS:
            out.faults += e["type"] == "invoke"
            out.cuts += e["type"] == "invoke" and e["f"] == "cut"
            out.kills += e["type"] == "invoke" and e["f"] == "kill"
            out.restart_failures += e["f"] == "restart-failed"
            continue
        if e["type"] == "invoke":
            open_[e["p"]] = e
            if e["f"] == "put":
                bodies.add(e["value"]["body"])
            continue
        inv = open_.pop(e["p"])
        out.ops += 1
        v = {**inv["value"], **e["value"]}
        if e["f"] == "put" and e["type"] == "ok":
            out.acknowledged += 1
            put_ok[v["body"]] = (v["id"], inv["t"], e["t"])
        elif e["f"] == "delete":
            if e["type"] == "ok":
                out.acknowledged += 1
                deleted_ok.setdefault(v["body"], (inv["t"], e["t"]))
            if e["type"] in ("ok", "info"):
                maybe_deleted.add(v["body"])
        elif e["f"] == "reserve" and e["type"] == "ok":
            seen.append((v["id"], v["body"], inv["t"], f"delivered at {e['t']:.3f}s"))
        elif e["f"] == "final" and e["type"] == "ok":
            final = {j["body"]: int(j["id"]) for j in v["jobs"]}
            seen.extend((jid, body, e["t"], "in the final read") for body, jid in final.items())
    for inv in open_.values():  # never completed: may have happened
        if inv["f"] == "delete":
            maybe_deleted.add(inv["value"]["body"])
    ids: dict[int, set[str]] = {}
    for body, (jid, sent_at, at) in put_ok.items():
        ids.setdefault(jid, set()).add(body)
        if final is None or body in maybe_deleted or body in final:
            continue
        if in_window(sent_at, at, cuts, window):
            out.lost_in_window += 1
        else:
            out.lost += 1
            out.details.append(f"lost: job {jid} ({body[:24]}) acknowledged at {at:.3f}s")
    out.reused_ids = sum(len(b) > 1 for b in ids.values())
    told: set[str] = set()
    for jid, body, sent, where in seen:
        if body in told:
            continue
        if body not in bodies:
            told.add(body)
            out.invented += 1
            out.details.append(f"invented: job {jid} body {body[:24]!r} {where}")
            continue
        if body not in deleted_ok or sent <= deleted_ok[body][1]:
            continue
        del_sent, gone = deleted_ok[body]
        told.add(body)
        if in_window(del_sent, gone, cuts, window):
            out.resurrected_in_window += 1
        else:
            out.resurrected += 1
            out.details.append(f"resurrected: job {jid} ({body[:24]}) deleted at {gone:.3f}s, {where}")
    return out


# -- the processes ----------------------------------------------------------------------------

def stalkd_command() -> list[str]:
    """``stalkd`` as this interpreter runs it (the project's venv)."""
    return [sys.executable, "-m", "stalkd.cli"]


@dataclass
class Run:
    """One campaign run's settings."""

    policy: str = "always"
    faults: int = 20
    cut_share: float = 0.7  # the share of faults that are power cuts (the rest: kill -9 only)
    strict: bool = True
    old: bool = False  # start from a data directory with history (seeded, cleanly shut down)
    wal_size: int = 65536  # bytes per segment: a roll and a snapshot every few hundred jobs
    producers: int = 2
    workers: int = 2
    body_bytes: int = 200
    min_gap: float = 0.3  # seconds of load between two faults, at least
    max_gap: float = 1.5
    seed: int = 0
    slack: float = 1.0
    extra_args: list[str] = field(default_factory=list)  # more `stalkd serve` options
    # Planted bugs, to show the checker catches them: the server runs under another policy
    # than the one it is judged by (say `never` judged as `always`: every fsync skipped), or
    # the file system drops the fsyncs of files whose path contains this text.
    server_policy: str = ""
    ignore_fsync: str = ""


class Node:
    """stalkd on a PowerFS mount, over a UNIX socket; every start and stop by PID."""

    def __init__(self, run: Run, work: str, history: History) -> None:
        self.run, self.history = run, history
        self.backing = os.path.join(work, "backing")
        self.mount = os.path.join(work, "mnt")
        self.sock = os.path.join(work, "stalkd.sock")
        self.log = os.path.join(work, "stalkd.log")
        self.fs = PowerFS(self.backing, self.mount, strict=run.strict,
                          log_path=os.path.join(work, "powerfs.log"), ignore_fsync=run.ignore_fsync)
        self.proc: subprocess.Popen[bytes] | None = None
        self.up = threading.Event()

    def start_server(self, repair: bool = False) -> bool:
        """Start stalkd; True once it serves, False if it exits or does not serve in time."""
        cmd = [*stalkd_command(), "serve", "--dir", os.path.join(self.mount, "data"),
               "--unix", self.sock, "--no-plain",
               "--durability", self.run.server_policy or self.run.policy,
               "-s", str(self.run.wal_size), "--log-level", "warning", *self.run.extra_args]
        if repair:
            cmd.append("--repair")
        with open(self.log, "ab") as log:
            log.write(f"--- {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        if not _serving(self.sock, self.proc, timeout=60.0):
            self.kill_server()
            return False
        self.up.set()
        return True

    def kill_server(self) -> None:
        self.up.clear()
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        self.proc = None

    def stop_server(self) -> None:
        """A clean stop (SIGTERM), for seeding an old data directory."""
        self.up.clear()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill_server()
        self.proc = None

    def restart(self) -> bool:
        """Start again on what is left; a server that will not is repaired, and counted."""
        if self.start_server():
            return True
        self.history.add(NEMESIS, "info", "restart-failed", {"log": log_tail(self.log)})
        return self.start_server(repair=True)

    def close(self) -> None:
        self.kill_server()
        self.fs.kill()


def _serving(sock: str, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether the server answers a command on ``sock`` within ``timeout`` (False if it exits)."""
    from stalkd.client import Client
    from stalkd.client.errors import ClientConnectionError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with Client(f"unix:{sock}", timeout=5.0) as c:
                c.stats()
                return True
        except (ClientConnectionError, OSError):
            time.sleep(0.05)  # poll: the server recovers before it listens
    return False


# -- the workload -----------------------------------------------------------------------------

class Workload:
    """Producers and workers over the blocking client, each op recorded with its outcome."""

    def __init__(self, node: Node, history: History, run: Run) -> None:
        self.node, self.history, self.run = node, history, run
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.starts = 0  # bodies carry it: unique across a stop and a start again

    def start(self) -> None:
        self.starts += 1
        for i in range(self.run.producers):
            self.threads.append(threading.Thread(target=self._produce, args=(i,), daemon=True))
        for i in range(self.run.workers):
            self.threads.append(threading.Thread(target=self._work, args=(i,), daemon=True))
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        self.node.up.set()  # let a thread waiting for the server see the stop
        for t in self.threads:
            t.join(timeout=60)
        self.threads.clear()
        self.stop.clear()

    @contextlib.contextmanager
    def _client(self) -> Iterator[Any]:
        from stalkd.client import Client

        c = Client(f"unix:{self.node.sock}", timeout=10.0, connect=False)
        try:
            yield c
        finally:
            with contextlib.suppress(Exception):
                c.close()

    def _call(self, process: str, f: str, value: dict[str, Any], fn: Any) -> Any:
        """Run ``fn``, recording it: ok with what it returned, fail on a refusal, info when the
        connection broke (the outcome is unknown)."""
        from stalkd.client.errors import BeanstalkError, ClientConnectionError

        self.history.add(process, "invoke", f, value)
        try:
            result, done = fn()
        except BeanstalkError as e:
            self.history.add(process, "fail", f, {"error": type(e).__name__})
            return None
        except (ClientConnectionError, OSError) as e:
            self.history.add(process, "info", f, {"error": type(e).__name__})
            self.node.up.wait(timeout=60)
            return None
        self.history.add(process, "ok", f, done)
        return result

    def _produce(self, i: int) -> None:
        rng = random.Random(self.run.seed * 1000 + self.starts * 100 + i)
        name = f"producer-{i}"
        n = 0
        with self._client() as c:
            while not self.stop.is_set():
                if not self.node.up.wait(timeout=1):
                    continue
                n += 1
                body = f"p{i}.{self.starts}-{n}-" + "x" * rng.randrange(self.run.body_bytes)

                def put(body: str = body) -> tuple[int, dict[str, Any]]:
                    c.use(TUBE)
                    jid = c.put(body.encode())
                    return jid, {"id": jid}

                self._call(name, "put", {"body": body, "tube": TUBE}, put)

    def _work(self, i: int) -> None:
        name = f"worker-{i}"
        with self._client() as c:
            while not self.stop.is_set():
                if not self.node.up.wait(timeout=1):
                    continue

                def reserve() -> tuple[Any, dict[str, Any]]:
                    c.watch(TUBE)
                    job = c.reserve(timeout=1)
                    return job, {"id": job.id, "body": job.body.decode()}

                job = self._call(name, "reserve", {"tube": TUBE}, reserve)
                if job is None:
                    continue

                def delete(job: Any = job) -> tuple[None, dict[str, Any]]:
                    c.delete(job)
                    return None, {}

                self._call(name, "delete", {"id": job.id, "body": job.body.decode()}, delete)

    def final_read(self) -> None:
        """Drain the queue after the run: every job left, as the ``final`` op."""
        from stalkd.client.errors import TimedOut

        self.history.add("final", "invoke", "final", {})
        jobs = []
        with self._client() as c:
            c.watch(TUBE)
            while True:
                try:
                    job = c.reserve(timeout=0)
                except TimedOut:
                    break
                jobs.append({"id": job.id, "body": job.body.decode(), "tube": TUBE})
                c.delete(job)
        self.history.add("final", "ok", "final", {"jobs": jobs})


# -- the campaign -----------------------------------------------------------------------------

def run(cfg: Run, work: str | None = None, keep: bool = False) -> Counts:
    """One run: seed (if ``old``), ``faults`` faults under load, a final read, the check."""
    work = work or tempfile.mkdtemp(prefix="powercut-")
    history = History()
    node = Node(cfg, work, history)
    rng = random.Random(cfg.seed)
    load = Workload(node, history, cfg)
    try:
        node.fs.start()
        if not node.start_server():
            raise RuntimeError(f"stalkd did not start on a fresh mount: {log_tail(node.log)}")
        load.start()
        if cfg.old:  # history: segments, snapshots, jobs; then a clean shutdown and a new start
            _wait_ops(history, 600, 3.0)
            load.finish()
            node.stop_server()
            node.fs.stop()
            node.fs.start()
            if not node.start_server():
                raise RuntimeError(f"stalkd did not start on a clean old mount: {log_tail(node.log)}")
            load.start()
        for _ in range(cfg.faults):
            _wait_ops(history, 20, rng.uniform(cfg.min_gap, cfg.max_gap))
            cut = rng.random() < cfg.cut_share
            history.add(NEMESIS, "invoke", "cut" if cut else "kill", {})
            node.kill_server()
            if cut:
                node.fs.cut()
            history.add(NEMESIS, "ok", "cut" if cut else "kill", {})
            if not node.restart():
                raise RuntimeError(f"stalkd did not start even with --repair: {log_tail(node.log)}")
        _wait_ops(history, 20, cfg.min_gap)
        load.finish()
        load.final_read()
    finally:
        load.stop.set()
        node.up.set()
        node.close()
        history.write(os.path.join(work, "history.jsonl"))
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    counts = check(history.events, cfg.policy, cfg.slack)
    counts.data_dir = "old" if cfg.old else "fresh"
    return counts


def _wait_ops(history: History, at_least: int, seconds: float) -> None:
    """Let the load run for ``seconds`` and until ``at_least`` more events were recorded (so a
    fault never lands on an idle server), at most a minute."""
    start, begin = len(history.events), time.monotonic()
    deadline = begin + 60.0
    while time.monotonic() < deadline and (
        time.monotonic() - begin < seconds or len(history.events) - start < at_least
    ):
        time.sleep(0.01)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def table(rows: list[Counts]) -> str:
    return markdown(HEADER, [r.row() for r in rows])


def progress(header: list[str], cells: list[str], details: list[str], first: int = 20) -> None:
    """Print a finished run's row and its first anomalies."""
    print(markdown(header, [cells]).splitlines()[-1], flush=True)
    for d in details[:first]:
        print("   ", d, flush=True)


def summary(header: list[str], rows: list[list[str]], path: str | None) -> None:
    """Print the table of every run (and write it to ``path``, if given)."""
    text = markdown(header, rows)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m campaign.powercut",
        description="Power-cut stalkd on a PowerFS mount under load and check the history: "
        "under 'always' nothing acknowledged may be lost; under every:MS and never only what "
        "the window allows; never anything invented; the server always restarts by itself.")
    ap.add_argument("--policy", action="append",
                    help="durability policy to run (repeatable; default: always, every:50, never)")
    ap.add_argument("--faults", type=int, default=40, help="faults per run (default 40)")
    ap.add_argument("--cut-share", type=float, default=0.7,
                    help="share of faults that are power cuts, the rest kill -9 (default 0.7)")
    ap.add_argument("--no-strict", action="store_true",
                    help="directory entries durable at once (ext4-like) instead of at fsync of the directory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", choices=("fresh", "old", "both"), default="both",
                    help="run on a fresh data directory, an old one (seeded, cleanly shut down, "
                    "then faulted), or both (default)")
    ap.add_argument("--table", help="also write the table (markdown) to this file")
    ap.add_argument("--keep", action="store_true", help="keep each run's directory (history, logs)")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="an extra `stalkd serve` argument (repeatable)")
    ap.add_argument("--plant-server-policy", metavar="P", default="",
                    help="planted bug: run the server under P while judging it by --policy")
    ap.add_argument("--plant-ignore-fsync", metavar="TEXT", default="",
                    help="planted bug: the file system drops fsyncs of paths containing TEXT")
    args = ap.parse_args(argv)
    rows: list[Counts] = []
    for policy in args.policy or ["always", "every:50", "never"]:
        for old in {"fresh": (False,), "old": (True,), "both": (False, True)}[args.data_dir]:
            cfg = Run(policy=policy, faults=args.faults, cut_share=args.cut_share,
                      strict=not args.no_strict, old=old, seed=args.seed,
                      extra_args=args.serve_arg, server_policy=args.plant_server_policy,
                      ignore_fsync=args.plant_ignore_fsync)
            rows.append(run(cfg, keep=args.keep))
            progress(HEADER, rows[-1].row(), rows[-1].details)
    summary(HEADER, [r.row() for r in rows], args.table)
    return 1 if any(r.lost or r.invented or r.resurrected or r.restart_failures for r in rows) else 0

if __name__ == "__main__":
    sys.exit(main())
