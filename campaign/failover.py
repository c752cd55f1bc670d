"""A failover run: the machine of the primary is lost while its standby lags, the standby is
promoted, and what the clients were told is checked against the promoted standby.

The link between the primary and its standby is cut under load (packets dropped, in network
namespaces: a paused standby would not do, its kernel keeps receiving into the socket's
buffer), so anything the primary acknowledges from then on is on the primary only unless the
primary waits for the standby (``--sync-standbys 1``); then the primary is killed (-9), the
standby promoted (SIGUSR2, as docs/standby.md describes) while the link is still cut, the link
healed, and the final read is taken from the standby. With ``sync=1`` nothing acknowledged may be
missing; with ``sync=0`` (replies sent before the standby's acknowledgement, the planted bug)
the checker must report the acknowledged puts the promotion lost.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from campaign import checker
from campaign.cluster import Cluster, wait_until
from campaign.history import History, Op
from campaign.net import NamespaceNet
from campaign.workload import Workload, WorkloadSpec, final_read

__all__ = ["acked_puts", "failover_run", "loaded"]


def acked_puts(history: History) -> int:
    return history.count("put", "ok")


def loaded(cluster: Cluster, history: History, rng: random.Random, puts: int) -> Workload:
    """``cluster`` started with its standby following, under a light load (two producers, one
    worker, one tube) that has had ``puts`` puts acknowledged."""
    cluster.start()
    wait_until(lambda: cluster.caught_up(), "the standby to follow")
    spec = WorkloadSpec(producers=2, workers=1, app_workers=0, tubes=1, delayed=0.0)
    load = Workload(history, cluster.addresses(), cluster.node_names(), spec, rng.randrange(1 << 30))
    load.start()
    wait_until(lambda: acked_puts(history) >= puts, "puts before the fault")
    return load


def failover_run(directory: Path, sync: int, *, acked_while_lagging: int = 20,
                 seed: int = 1) -> tuple[list[Op], list[checker.Anomaly]]:
    """Run it in ``directory``; the history's operations and the checker's anomalies."""
    directory.mkdir(parents=True, exist_ok=True)
    net = NamespaceNet(["p", "s"])  # OSError where namespaces cannot be made
    cluster = Cluster(directory, "standby", sync=sync, net=net)
    history = History(directory / "history.jsonl")
    rng = random.Random(seed)
    try:
        load = loaded(cluster, history, rng, 10)
        p = cluster.nodes["p"]

        def acked() -> int:
            return acked_puts(history)

        ev = history.invoke("nemesis", "start", {"nemesis": "lose-primary", "breaks": True})
        net.cut("p", "s")
        before = acked()
        # with the standby cut off, a primary that waits for it acknowledges nothing: give it
        # the time it would need to acknowledge what an asynchronous one does at once
        deadline = time.monotonic() + 5.0
        while acked() < before + acked_while_lagging and time.monotonic() < deadline:
            time.sleep(0.05)
        p.kill9()
        history.complete(ev, "ok", {"node": "p"})
        load.stop()
        ev = history.invoke("nemesis", "promote", {"old": "p", "new": "s"})
        # promoted while the link is still cut: once healed, the dead primary's kernel would
        # otherwise deliver the stream it still held (its socket outlives the process) to a
        # standby still following, and what is lost would depend on that race
        cluster.promote("s")
        history.complete(ev, "ok", {"old": "p", "new": "s"})
        net.heal()
        final_read(history, cluster.client_address("s"), 100)
    finally:
        history.close()
        cluster.close()
    ops = history.ops()
    return ops, checker.check(ops)
