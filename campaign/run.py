"""One run: a cluster, the workload on it, a nemesis started and stopped ``cycles`` times, the
final read once every fault is undone, and the checker's verdict.

Everything a run makes is under its directory: ``history.jsonl`` (every event), the nodes'
logs and data, ``result.json`` (the row of the table and every anomaly) and, from
``report``, ``plot.png``.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from campaign import checker, report
from campaign.cluster import Cluster, wait_until
from campaign.hacluster import NAMES, SETTLE, HaCluster
from campaign.history import History
from campaign.nemesis import NEMESES, Nemesis
from campaign.net import make_net
from campaign.workload import Workload, WorkloadSpec, final_read

__all__ = ["RunSpec", "RunResult", "run"]


@dataclass(frozen=True)
class RunSpec:
    nemesis: str
    topology: str = "single"  # "standby": a primary and a sync standby; "ha": three --ha nodes on etcd
    cycles: int = 3
    fault: float = 4.0  # seconds each fault lasts (longer than the workload's TTR: pauses outlast it)
    quiet: float = 2.0  # seconds between faults
    seed: int = 1
    flags: tuple[str, ...] = ()  # for every node, e.g. ("--durability", "never")
    sync: int = 1  # the primary's --sync-standbys in the standby and ha topologies
    net: str = "netns"  # for partitions: "netns" or "proxy"
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)

    @property
    def label(self) -> str:
        return f"{self.nemesis}-{self.topology}"


@dataclass
class RunResult:
    spec: RunSpec
    directory: Path
    row: dict[str, Any]
    anomalies: list[checker.Anomaly]
    net_note: str = ""  # which network the partitions used, and why when not namespaces

    def to_json(self) -> dict[str, Any]:
        return {"spec": {**asdict(self.spec), "workload": asdict(self.spec.workload)},
                "row": self.row, "net": self.net_note,
                "anomalies": [asdict(a) for a in self.anomalies]}


def _cluster(spec: RunSpec, root: Path) -> tuple[Cluster, str]:
    # small segments under a full disk: a roll (which needs new space) comes every few seconds
    flags = (*spec.flags, "-s", "131072") if spec.nemesis == "full-disk" else spec.flags
    if spec.topology == "ha":
        return HaCluster(root, flags=flags, sync=spec.sync, clock=spec.nemesis == "clock-jump",
                         disk=dict.fromkeys(NAMES, 48) if spec.nemesis == "full-disk" else None), ""
    names = ["p"] if spec.topology == "single" else ["p", "s"]
    net, note = None, ""
    if spec.nemesis == "partition":
        net, why = make_net(names, spec.net)
        note = net.kind + (f" ({why})" if why else "")
    disk = {n: 48 for n in names} if spec.nemesis == "full-disk" else None
    try:
        return Cluster(root, spec.topology, flags=flags, net=net, sync=spec.sync,
                       clock=spec.nemesis == "clock-jump", disk=disk), note
    except BaseException:
        if net is not None:
            net.close()
        raise


def run(spec: RunSpec, directory: Path, nemesis: Nemesis | None = None,
        progress: Callable[[str], None] | None = None) -> RunResult:
    """Run ``spec`` in ``directory`` (emptied first: a run's history and data are its own);
    ``nemesis`` overrides the one named; ``progress`` is given a line after each fault."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    rng = random.Random(spec.seed)
    fault = nemesis or NEMESES[spec.nemesis]()
    cluster, note = _cluster(spec, directory)
    history = History(directory / "history.jsonl")
    try:
        cluster.start()
        if spec.topology != "single" and spec.sync:
            wait_until(lambda: cluster.caught_up(), "the standby to follow")
        cluster.watch(history)
        load = Workload(history, cluster.addresses(), cluster.node_names(), spec.workload, spec.seed)
        load.start()
        time.sleep(spec.quiet)  # the schedule: load before the first fault
        began = time.monotonic()
        for cycle in range(1, spec.cycles + 1):
            _nemesis_op(history, "start", fault, lambda: fault.start(cluster, rng))
            time.sleep(spec.fault)
            _nemesis_op(history, "stop", fault, lambda: fault.stop(cluster, rng))
            time.sleep(spec.quiet)
            if progress is not None:
                progress(_progress_line(spec, cycle, history, time.monotonic() - began))
        load.stop()
        cluster.revive()
        if spec.topology != "single" and spec.sync:
            wait_until(lambda: cluster.caught_up(), "the standby to catch up after the run", SETTLE)
        slack = sum(1 for op in history.ops() if op.f == "put" and not op.ok) + 10
        final_read(history, cluster.client_address(cluster.primary), slack)
    finally:
        history.close()
        cluster.close()
    ops = history.ops()
    anomalies = checker.check(ops)
    result = RunResult(spec, directory, report.row(spec.label, spec.cycles, ops, anomalies), anomalies, note)
    (directory / "result.json").write_text(json.dumps(result.to_json(), indent=1, default=str))
    return result


def _progress_line(spec: RunSpec, cycle: int, history: History, elapsed: float) -> str:
    acked = history.count("put", "ok")
    left = elapsed / cycle * (spec.cycles - cycle)
    return (f"   {spec.label}: fault {cycle}/{spec.cycles}, {acked} puts acknowledged, "
            f"{elapsed:.0f} s, about {left:.0f} s left")


def _nemesis_op(history: History, phase: str, fault: Nemesis, act: Any) -> None:
    ev = history.invoke("nemesis", phase, {"nemesis": fault.name, "breaks": fault.breaks})
    try:
        what = act()
    except Exception as e:
        history.complete(ev, "fail", {"error": f"{type(e).__name__}: {e}"})
        raise
    history.complete(ev, "ok", what)
