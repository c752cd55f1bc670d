"""The ``ha`` topology: three ``--ha`` nodes (``a``, ``b``, ``c``) on a real etcd the run
starts (Debian's etcd-server, started as ``tests/etcdserver.py`` does for the tests), each
reaching etcd through a relay of its own (``UnixProxy``), so one node's way to etcd can be cut.

``--sync-standbys 1`` (``RunSpec.sync``): the configuration docs/cluster.md recommends for
three nodes. Every acknowledged change is on the primary and the one standby of the sync set,
so the loss of any one node is survived without a person and writes go on while the faulted
node is away (with 2, every fault of a node would stop all writes until it was back); and each
failover exercises the sync set: who may campaign, and its re-election once the old primary
rejoins.

Nodes fail over by themselves, so the harness does not know the primary: ``primary`` asks the
nodes, and ``targets`` (what a nemesis may hit) waits until the cluster has settled, one
primary followed and caught up by both others, with etcd's sync set naming a standby (else
nobody may take over), and names that primary alone. Threads started by ``watch`` poll every
node's role and epoch and record each promotion seen as an op of their own process
(``history.WATCH``: the nemesis may have an op outstanding then) with ``old`` and ``new``, which
the checker's ``fenced-ack`` rule reads: its invocation is the last time the new primary was
seen not leading at that epoch (the promotion came after it), its completion when it was seen
leading.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from campaign.cluster import Cluster, Node, _mount_tmpfs, wait_until
from campaign.history import WATCH, History

__all__ = ["HaCluster", "NAMES", "TTL"]

NAMES = ("a", "b", "c")
TTL = "2"  # seconds of lease, as the --ha tests run: a failover takes a few seconds, not ten
CLUSTER = "campaign"  # the key prefix in etcd: /stalkd/campaign
SETTLE = 90.0  # seconds a restarted node may take to rejoin on a loaded machine
_POLL = 0.2


def _etcd_helpers() -> Any:
    """``tests/etcdserver.py`` (the etcd process and the relays), imported from the source tree."""
    if shutil.which("etcd") is None:
        raise RuntimeError("the ha topology needs etcd (Debian's etcd-server; scripts/system-deps.sh installs it)")
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    import etcdserver  # type: ignore[import-not-found]  # tests/, not a package

    return etcdserver


class HaCluster(Cluster):
    """Three ``--ha`` nodes and their etcd, under ``root``; ``flags`` go to every node,
    ``disk`` and ``clock`` as for ``Cluster``."""

    def __init__(self, root: Path, *, flags: tuple[str, ...] = (), sync: int = 1, clock: bool = False,
                 disk: dict[str, int] | None = None) -> None:
        self.root, self.topology, self.net, self.sync = root.resolve(), "ha", None, sync
        self.helpers = _etcd_helpers()
        self.etcd: Any = None
        self.proxies: dict[str, Any] = {}
        self.nodes = {}
        self.mounts = []
        self._stop = threading.Event()
        self._watchers: list[threading.Thread] = []
        self._leader: tuple[str, int] = ("", -1)  # the latest promotion seen: node, epoch
        secret = self.root / "replication.secret"
        self.root.mkdir(parents=True, exist_ok=True)
        secret.write_text(os.urandom(24).hex() + "\n")
        secret.chmod(0o600)
        for n in NAMES:
            d = self.root / n / "data"
            d.mkdir(parents=True, exist_ok=True)
            if disk and n in disk:
                _mount_tmpfs(d, disk[n])
                self.mounts.append(d)
            # the relay binds now; it reaches etcd (started by ``start``) per connection
            self.proxies[n] = self.helpers.UnixProxy(self.root / f"{n}-etcd", str(self.root / "etcd" / "client:1"))
            etcd = self.proxies[n].address(f"/stalkd/{CLUSTER}")
            self.nodes[n] = Node(n, d, ["-s", "1048576", *flags, "--ha", etcd, "--name", n, "--ha-ttl", TTL,
                                        "--sync-standbys", str(sync), "--replication-secret", str(secret)],
                                 clock_file=self.root / n / "clock" if clock else None)

    def start(self) -> None:
        self.etcd = self.helpers.start_etcd(self.root / "etcd")
        assert all(p.target == self.etcd.socket for p in self.proxies.values())
        # a first: it takes the leader key, so the runs start alike
        self.nodes["a"].start()
        wait_until(lambda: self.role("a")[0] == "primary", "a to lead")
        for n in NAMES[1:]:
            self.nodes[n].start()
        wait_until(self.settled, "b and c to follow a", SETTLE)
        self._leader = ("a", self.role("a")[1])

    def role(self, name: str, timeout: float = 5.0) -> tuple[str, int]:
        """What node ``name`` says it is, and its epoch (``down``, -1 if it does not answer)."""
        try:
            st = self.stats(name, timeout)
            return st.get("role", ""), int(st.get("epoch", -1))
        except (OSError, ValueError):
            return "down", -1

    def _primary(self) -> str | None:
        leaders = [n for n in NAMES if self.role(n)[0] == "primary"]
        return leaders[0] if len(leaders) == 1 else None

    @property
    def primary(self) -> str:
        """The node that alone says it is primary (waited for)."""
        wait_until(lambda: self._primary() is not None, "one primary", SETTLE)
        p = self._primary()
        assert p is not None
        return p

    @primary.setter
    def primary(self, name: str) -> None:
        raise AttributeError("the ha topology's primary is whoever etcd made it")

    def settled(self) -> bool:
        """One primary, both others its standbys: each names it the leader, and it streams to
        both, which hold its whole log."""
        try:
            st = {n: self.stats(n) for n in NAMES}
        except (OSError, ValueError):
            return False
        leaders = [n for n in NAMES if st[n].get("role") == "primary"]
        if len(leaders) != 1 or sorted(s.get("role", "") for s in st.values()) != ["primary", "standby", "standby"]:
            return False
        p = leaders[0]
        return (all(s.get("cluster-leader") == p for s in st.values())
                and int(st[p].get("standbys", 0)) >= 2 and int(st[p].get("standby-lag", 1)) == 0
                and self._sync_set_full(p))

    def _sync_set_full(self, primary: str) -> bool:
        """etcd's sync set is ``primary``'s and names ``sync`` standbys: one of them may take
        over (outside it no node campaigns, so a fault right after a failover, before the set
        was written again, would find no one to promote)."""
        from stalkd.ha.address import parse_cluster
        from stalkd.ha.etcd import Etcd, EtcdError
        from stalkd.ha.syncset import read_sync

        if not self.sync:
            return True
        address = parse_cluster(self.etcd.cluster(CLUSTER))
        try:
            doc = read_sync(Etcd(address, timeout=1.0), address.key("sync"))
        except EtcdError:
            return False
        return doc is not None and doc.leader == primary and len(set(doc.members) - {primary}) >= self.sync

    def caught_up(self) -> bool:
        return self.settled()

    def targets(self) -> list[str]:
        """The primary, once the cluster has settled (a fault hits a healthy cluster's primary;
        a node that never rejoins shows here, by name, as a run that could not finish)."""
        try:
            wait_until(self.settled, "the cluster to settle before a fault", SETTLE)
        except TimeoutError as e:
            roles = ", ".join(f"{n}: {self.role(n)[0]}" for n in NAMES)
            raise TimeoutError(f"{e} ({roles}; {self.states()})") from None
        return [self.primary]

    def watch(self, history: History) -> None:
        below = dict.fromkeys(NAMES, history.now())  # when each was last seen not leading past the epoch
        lock = threading.Lock()
        for n in NAMES:  # a thread a node: a paused one holds up only its own polls
            t = threading.Thread(target=self._watch, args=(history, n, below, lock), name=f"promotions-{n}", daemon=True)
            t.start()
            self._watchers.append(t)

    def _watch(self, history: History, n: str, below: dict[str, float], lock: threading.Lock) -> None:
        while not self._stop.wait(_POLL):
            sent = history.now()
            role, epoch = self.role(n, timeout=1.0)
            with lock:
                old, top = self._leader
                if role == "primary" and epoch > top:
                    self._leader = (n, epoch)
                    if n != old:  # (led again at a new epoch with nobody in between: no one fenced)
                        history.record(WATCH, "promote", below[n], "ok", {"old": old, "new": n, "epoch": epoch})
                elif role != "down":
                    below[n] = sent

    def cut_etcd(self, name: str) -> None:
        """Node ``name``'s way to etcd cut (the others still reach it)."""
        self.proxies[name].cut()

    def heal_etcd(self, name: str) -> None:
        self.proxies[name].heal()

    def revive(self) -> None:
        for p in self.proxies.values():
            p.heal()
        super().revive()

    def close(self) -> None:
        self._stop.set()
        for t in self._watchers:
            t.join(10)
        try:
            super().close()
        finally:
            for p in self.proxies.values():
                p.cut()
            if self.etcd is not None:
                self.etcd.stop()
