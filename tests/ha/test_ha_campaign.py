"""The failover campaign of a three-node ``--ha`` cluster: cycles of load on the primary and
one fault at a time against it (kill -9, a pause past its lease, its way to etcd cut), checked
after each cycle against what the clients were told (the failover campaign's rules: nothing
acknowledged lost, nothing deleted back, nothing duplicated or invented).

Each node reaches etcd through a proxy of its own, so any one can be cut off. ``--sync-standbys
2``: every acknowledged change is on every node. STALKD_HA_CYCLES sets the cycles (2 in the
suite; ``make ha-campaign`` runs hundreds), STALKD_HA_SEED the seed.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

import stalkd
from etcdserver import EtcdProcess, UnixProxy
from server.proc import StalkdProcess, start_stalkd
from stalkd.client import errors
from standby.cluster import caught_up, secret_file, stats, until
from standby.test_zero_loss import Ledger, _load, check

CYCLES = int(os.environ.get("STALKD_HA_CYCLES", "2"))
SEED = int(os.environ.get("STALKD_HA_SEED", "20261128"))
NAMES = ("a", "b", "c")
TTL = "2"


class Cluster:
    def __init__(self, etcd: EtcdProcess, tmp: Path) -> None:
        self.tmp = tmp
        self.proxies = {n: UnixProxy(tmp / f"{n}-etcd", etcd.socket) for n in NAMES}
        self.nodes: dict[str, StalkdProcess] = {}
        for n in NAMES:
            self.start(n)

    def start(self, n: str) -> None:
        self.nodes[n] = start_stalkd("--dir", str(self.tmp / n), "-s", "65536", "--ha",
                                     self.proxies[n].address(), "--name", n, "--ha-ttl", TTL,
                                     "--sync-standbys", "2", "--replication-secret", secret_file(self.tmp / n))

    def role(self, n: str) -> str:
        try:
            return str(stats(self.nodes[n])["role"])
        except (errors.ClientConnectionError, errors.BeanstalkError, OSError):
            return "down"

    def primary(self) -> str | None:
        roles = {n: self.role(n) for n in NAMES}
        leaders = [n for n, r in roles.items() if r == "primary"]
        return leaders[0] if len(leaders) == 1 and sorted(roles.values()) == ["primary", "standby", "standby"] else None

    def settled(self) -> bool:
        """One primary, and both others its standbys: each sees it as the leader, both stream from
        it (a standby that still follows the old one rejoins later, closing its connections) and
        hold its log."""
        p = self.primary()
        if p is None:
            return False
        for n in NAMES:
            if str(stats(self.nodes[n]).get("cluster-leader")) != p:
                return False
        if int(stats(self.nodes[p]).get("standbys", 0)) < 2:  # both stream from it, not elsewhere
            return False
        return all(caught_up(self.nodes[p], self.nodes[n]) for n in NAMES if n != p)

    def stop(self) -> None:
        for p in self.proxies.values():
            p.cut()
        for node in self.nodes.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.proc.pid, signal.SIGCONT)
            node.stop()


def load(address: str, ledger: Ledger, worker: int, stop: threading.Event) -> None:
    with contextlib.suppress(errors.NotPrimary, errors.BeanstalkError):
        _load(address, ledger, worker, stop)


def one_cycle(cl: Cluster, rng: random.Random, cycle: int, ledger: Ledger) -> str:
    """One fault against the primary under load; ``ledger`` holds every cycle's (bodies unique)."""
    until(cl.settled, "a primary with both standbys following", timeout=90, logs=tuple(cl.nodes.values()))
    p = cl.primary()
    assert p is not None
    stop = threading.Event()
    threads = [threading.Thread(target=load, args=(cl.nodes[p].address, ledger, 10 * cycle + w, stop))
               for w in range(3)]
    for t in threads:
        t.start()
    before = len(ledger.put)
    want = rng.randrange(20, 200)
    until(lambda: len(ledger.put) - before >= want, "load", logs=(cl.nodes[p],))
    fault = rng.choice(["kill9", "pause", "cut"])
    node = cl.nodes[p]
    if fault == "kill9":
        node.kill9()
    elif fault == "pause":
        os.kill(node.proc.pid, signal.SIGSTOP)
    else:
        cl.proxies[p].cut()
    others = [n for n in NAMES if n != p]
    until(lambda: any(cl.role(n) == "primary" for n in others), f"cycle {cycle} ({fault}): a new primary",
          timeout=90, logs=tuple(cl.nodes.values()))
    stop.set()
    if fault == "pause":
        os.kill(node.proc.pid, signal.SIGCONT)
    elif fault == "cut":
        cl.proxies[p].heal()
    for t in threads:
        t.join()
    if fault == "kill9":
        cl.start(p)
    until(cl.settled, f"cycle {cycle} ({fault}): the cluster to settle", timeout=90,
          logs=tuple(cl.nodes.values()))
    new = cl.primary()
    assert new is not None and new != p
    for n in NAMES:
        check(cl.nodes[n].address, ledger)
    ledger.attempted.add(b"after-%d" % cycle)
    with stalkd.Client(cl.nodes[new].address) as c:
        ledger.put[b"after-%d" % cycle] = c.put(b"after-%d" % cycle)
    return fault


@pytest.mark.slow
def test_ha_cluster_survives_faults_of_its_primary(etcd: EtcdProcess, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    cl = Cluster(etcd, tmp_path)
    faults: dict[str, int] = {}
    ledger = Ledger()
    t0 = time.monotonic()
    try:
        for cycle in range(CYCLES):
            f = one_cycle(cl, rng, cycle, ledger)
            faults[f] = faults.get(f, 0) + 1
    finally:
        cl.stop()
    print(f"{CYCLES} cycles in {time.monotonic() - t0:.0f} s: {faults}; {len(ledger.put)} puts "
          f"acknowledged, {len(ledger.deleted)} deletes, none lost")
