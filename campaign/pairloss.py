"""Power loss of a primary and its sync standby together: both data directories on
:mod:`campaign.powerfs` mounts, both power-cut at the same moment under load, both restarted
on what was durable, the primary as primary and the standby as its standby again; or, with
``promote``, the primary's machine stays down while its standby comes back and is promoted (as
an operator would, the machine having been lost), and the old primary then rejoins as the new
one's standby: the roles alternate cut after cut.

The workload, history and checker are the campaign's (``campaign.workload``,
``campaign.history``, ``campaign.checker``); the final read is taken from the primary once the
standby has caught up. Under ``always`` with ``--sync-standbys 1`` a reply waits for the
primary's fsync and the standby's, so nothing acknowledged may be lost, resurrected or
invented across any number of such cuts (docs/architecture.md, "What a reply promises"). A
standby whose log outran the primary's at the cut (it fsynced records the primary had not) is
expected to find its log diverged and resync by itself; a server that does not come back by
itself is a *restart failure*: recorded, counted, and started with ``--repair`` so the run
goes on; one that will not start even then ends the run, which is judged as far as it went
(the final read from the primary).

The planted bug for this scenario: both file systems drop the fsyncs of the WAL's segments
(``ignore_fsync="seg-"``, a disk that lies on both machines): servers that do not restart
without a repair, and acknowledged puts lost.

``python -m campaign.pairloss --cycles 30`` prints the row (``--out`` keeps the history, logs,
``result.json`` and a plot).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign import checker, report
from campaign.cluster import Cluster, Node, wait_until
from campaign.failover import acked_puts
from campaign.history import History, Op
from campaign.powerfs import PowerFS
from campaign.workload import Workload, WorkloadSpec, final_read

__all__ = ["PairResult", "pair_power_run", "main"]

NEMESIS = "power-cut-both"


@dataclass
class PairResult:
    ops: list[Op]
    anomalies: list[checker.Anomaly]
    row: dict[str, Any]
    resyncs: int  # standby restarts that found their log diverged and copied the primary's
    restart_failures: int  # starts that needed --repair (a policy's promise broken)
    unrecoverable: str = ""  # the node that would not start even with --repair, and why


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _after(count: Callable[[], int], at_least: int, not_before: float) -> Callable[[], bool]:
    return lambda: count() >= at_least and time.monotonic() >= not_before


def _start(node: Node) -> str:
    """Start ``node`` on what its disk kept; one that will not is started with ``--repair`` (so
    the run goes on and the checker sees what the repair cut). Why it would not, or ""."""
    try:
        node.start()
        return ""
    except RuntimeError as e:
        why = str(e)[-1500:]
    node.flags.append("--repair")
    try:
        node.start()
    finally:
        node.flags.remove("--repair")
    return why


def pair_power_run(directory: Path, cycles: int = 3, *, policy: str = "always", sync: int = 1,
                   strict: bool = True, seed: int = 1, ignore_fsync: str = "", promote: bool = False,
                   min_gap: float = 0.5, max_gap: float = 2.5) -> PairResult:
    """Run it in ``directory``: ``cycles`` power cuts of both nodes, each after a random gap of
    load (and at least 20 more acknowledged puts). ``directory`` is emptied first: a run's
    history and data are its own."""
    directory = directory.resolve()  # the mounts and the servers' --dir: one meaning anywhere
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    rng = random.Random(seed)
    fs = {n: PowerFS(str(directory / n / "backing"), str(directory / n / "mnt"), strict=strict,
                     log_path=str(directory / n / "powerfs.log"), ignore_fsync=ignore_fsync)
          for n in ("p", "s")}
    # 64 KiB segments: rolls and snapshots every few hundred jobs, on both sides
    cluster = Cluster(directory, "standby", sync=sync, flags=("--durability", policy, "-s", "65536"))
    history = History(directory / "history.jsonl")
    resyncs = failures = 0
    unrecoverable = ""  # a node that would not start even with --repair: the run stops there
    try:
        for n, f in fs.items():
            f.start()
            node = cluster.nodes[n]
            node.data_dir, node.log_dir = Path(f.mountpoint) / "data", directory / n
            # made by the harness, so made durable by it: the server's own files are its job
            node.data_dir.mkdir()
            _fsync_dir(Path(f.mountpoint))
        cluster.start()
        wait_until(lambda: cluster.caught_up(), "the standby to follow")
        spec = WorkloadSpec(app_workers=0)
        load = Workload(history, cluster.addresses(), cluster.node_names(), spec, seed)
        load.start()

        def acked() -> int:
            return acked_puts(history)

        for _ in range(cycles):
            before, gap = acked(), rng.uniform(min_gap, max_gap)
            began = time.monotonic()
            wait_until(_after(acked, before + 20, began + gap), "load before the cut", timeout=120)
            ev = history.invoke("nemesis", "start", {"nemesis": NEMESIS, "breaks": True})
            for node in cluster.nodes.values():  # both machines at once: nothing more is written
                node.signal(signal.SIGKILL)
            for f in fs.values():  # ...and what they had not made durable is gone
                f.kill()
            for node in cluster.nodes.values():
                node.kill9()  # reaped
            history.complete(ev, "ok", {"nodes": sorted(fs)})
            ev = history.invoke("nemesis", "stop", {"nemesis": NEMESIS, "breaks": True})
            for f in fs.values():
                f.start()
            old = cluster.primary
            standby = old if promote else next(n for n in sorted(cluster.nodes) if n != old)
            seen = len(cluster.nodes[standby].log_text())  # the node that may resync
            try:
                if promote:  # the primary's machine stays down: its standby comes back alone
                    new = next(n for n in sorted(cluster.nodes) if n != old)
                    refused = {new: why} if (why := _start(cluster.nodes[new])) else {}
                    history.complete(ev, "ok", {"nodes": sorted(fs), "restart-failed": refused})
                    ev = history.invoke("nemesis", "promote", {"old": old, "new": new})
                    cluster.promote(new)
                    history.complete(ev, "ok", {"old": old, "new": new})
                    ev = history.invoke("nemesis", "rejoin", {"node": old})
                    cluster.follow(old, new)  # and the old primary rejoins as its standby
                    if why := _start(cluster.nodes[old]):
                        refused[old] = why
                else:
                    refused = {n: why for n in (old, standby) if (why := _start(cluster.nodes[n]))}
            except RuntimeError as e:  # not even with --repair: the run ends, judged as it is
                lost_node = next((n for n, node in cluster.nodes.items() if not node.running), "?")
                unrecoverable = f"{lost_node}: {str(e)[-1500:]}"
                failures += 1
                history.complete(ev, "info", {"nodes": sorted(fs), "unrecoverable": unrecoverable})
                break
            failures += len(refused)
            wait_until(lambda: cluster.caught_up(), "the standby to follow after the cut", timeout=120)
            resyncs += "quarantine" in cluster.nodes[standby].log_text()[seen:]
            history.complete(ev, "ok", {"nodes": sorted(fs), "restart-failed": refused})
        load.stop()
        if unrecoverable:
            if not cluster.nodes[cluster.primary].running:
                raise RuntimeError(f"the primary would not start, even with --repair: {unrecoverable}")
        else:
            wait_until(lambda: cluster.caught_up(), "the standby to catch up after the run")
        slack = sum(1 for op in history.ops() if op.f == "put" and not op.ok) + 10
        final_read(history, cluster.client_address(cluster.primary), slack)
    finally:
        history.close()
        cluster.close()
        for f in fs.values():
            f.kill()
    ops = history.ops()
    anomalies = checker.check(ops)
    row = report.row(f"{NEMESIS}{'-promote' if promote else ''}-{policy}", cycles, ops, anomalies)
    result = PairResult(ops, anomalies, row, resyncs, failures, unrecoverable)
    (directory / "result.json").write_text(json.dumps(
        {"row": row, "resyncs": resyncs, "restart failures": failures, "unrecoverable": unrecoverable,
         "anomalies": [a.__dict__ for a in anomalies]}, indent=1, default=str))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m campaign.pairloss",
        description="Cut the power of a primary and its sync standby at the same moment, under load, "
                    "again and again, and check what the clients were told against what survived. "
                    "Prints the run's row; --out keeps its history, logs, result.json and plot.")
    ap.add_argument("--cycles", type=int, default=30, help="power cuts of both nodes (default 30)")
    ap.add_argument("--policy", default="always",
                    help="--durability of both nodes (default always; under every/never the checker "
                         "counts the policy's allowed losses as lost)")
    ap.add_argument("--seed", type=int, default=1, help="the run's random seed (default 1)")
    ap.add_argument("--no-strict", action="store_true",
                    help="directory entries durable at once (ext4-like) instead of at fsync of the directory")
    ap.add_argument("--plant-ignore-fsync", metavar="TEXT", default="",
                    help="planted bug: both file systems drop fsyncs of paths containing TEXT")
    ap.add_argument("--promote", action="store_true",
                    help="after each cut the primary's machine stays down: its standby is promoted, "
                         "and the old primary rejoins as the new one's standby")
    ap.add_argument("--out", type=Path, default=Path("build/pairloss"), help="output directory")
    args = ap.parse_args(argv)
    r = pair_power_run(args.out, args.cycles, policy=args.policy, strict=not args.no_strict, seed=args.seed,
                       ignore_fsync=args.plant_ignore_fsync, promote=args.promote)
    report.plot(r.ops, args.out / "plot.png", f"{r.row['run']} ({args.cycles} cuts)")
    print(report.table([r.row]))
    cuts = sum(1 for op in r.ops if op.process == "nemesis" and op.f == "start" and op.ok)
    print(f"power cuts: {cuts}; standby resyncs after a cut: {r.resyncs}; restart failures: {r.restart_failures}")
    if r.unrecoverable:
        print(f"stopped: would not start even with --repair: {r.unrecoverable}")
    for a in r.anomalies[:20]:
        print(f"   {a.kind} {a.job}: {a.detail}")
    return 1 if r.anomalies or r.restart_failures or r.unrecoverable else 0


if __name__ == "__main__":
    sys.exit(main())
