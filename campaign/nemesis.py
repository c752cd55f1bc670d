"""Nemeses: the faults a campaign injects, each a small class with one interface.

A nemesis has a ``name``, says whether its fault can close connections (``breaks``: the
checker then lets a worker's hold of a job end during it), and has two methods, both given the
``Cluster`` under test and a ``random.Random`` to choose with:

- ``start(cluster, rng)``: inject the fault; returns a dict describing what it did (which node,
  which link), written into the history with the ``start`` op;
- ``stop(cluster, rng)``: undo it; the cluster must then be able to serve again by itself (a
  killed node is restarted, a paused one continued, a cut link healed, a disk emptied).

The runner calls ``start``, lets the workload run for the fault's duration, calls ``stop`` and
lets it run quietly again; every call is recorded as an op of process ``nemesis``. A new fault
(a power cut, say) is one more class with these three members, added to ``NEMESES``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from pathlib import Path
from typing import Any, Protocol

from campaign.cluster import Cluster, Node, wait_until

__all__ = ["Nemesis", "Kill9", "Pause", "Partition", "FullDisk", "ClockJump", "Failover", "EtcdCut", "NEMESES"]


class Nemesis(Protocol):
    name: str
    breaks: bool

    def start(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]: ...

    def stop(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]: ...


class _OneNode:
    """A fault done to one node chosen at random (``hit``) and undone at ``stop`` (``undo``)."""

    def __init__(self) -> None:
        self.victim = ""

    def hit(self, node: Node) -> None:
        raise NotImplementedError

    def undo(self, node: Node) -> None:
        raise NotImplementedError

    def start(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        self.victim = rng.choice(cluster.targets())
        self.hit(cluster.nodes[self.victim])
        return {"node": self.victim}

    def stop(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        self.undo(cluster.nodes[self.victim])
        return {"node": self.victim}


class Kill9(_OneNode):
    """SIGKILL a node (any of them); ``stop`` restarts it on the same address and data."""

    name, breaks = "kill9", True
    topologies = ("single", "standby", "ha")

    def hit(self, node: Node) -> None:
        node.kill9()

    def undo(self, node: Node) -> None:
        node.start()


class Pause(_OneNode):
    """SIGSTOP a node, SIGCONT it at ``stop`` (the runner holds it longer than the TTRs)."""

    name, breaks = "pause", False
    topologies = ("single", "standby", "ha")

    def hit(self, node: Node) -> None:
        node.signal(signal.SIGSTOP)

    def undo(self, node: Node) -> None:
        node.signal(signal.SIGCONT)


class Partition:
    """Cut the link between two of: the clients and the nodes (drop both ways); heal at stop."""

    name, breaks = "partition", True
    topologies = ("single", "standby")  # the ha topology's own cut is its way to etcd (EtcdCut)

    def start(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        assert cluster.net is not None, "a partition needs the cluster on a net"
        a, b = rng.sample(["client", *sorted(cluster.nodes)], 2)
        cluster.net.cut(a, b)
        return {"between": sorted([a, b]), "net": cluster.net.kind}

    def stop(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        assert cluster.net is not None
        cluster.net.heal()
        return {}


class FullDisk:
    """Fill the tmpfs under one node's data directory (the cluster mounted it: ``disk``) with a
    file until the file system is full; ``stop`` removes the file."""

    name, breaks = "full-disk", False
    topologies = ("single", "standby", "ha")
    FILLER = ".campaign-filler"

    def __init__(self) -> None:
        self.path: Path | None = None

    def start(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        victim = rng.choice([n for n in cluster.targets() if cluster.nodes[n].data_dir in cluster.mounts])
        self.path = cluster.nodes[victim].data_dir / self.FILLER
        chunk = b"\0" * (1 << 20)
        with open(self.path, "wb") as f, contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                f.write(chunk)
                f.flush()
        return {"node": victim}

    def stop(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        return {}


class ClockJump:
    """Step one node's wall clock (libfaketime; the cluster was made with ``clock=True``) an
    hour forward or back; ``stop`` sets it right. The monotonic clock does not move."""

    name, breaks = "clock-jump", False
    topologies = ("single", "standby", "ha")

    def __init__(self) -> None:
        self.victim = ""

    def _set(self, cluster: Cluster, offset: str) -> None:
        clock = cluster.nodes[self.victim].clock_file
        assert clock is not None, "a clock jump needs the cluster made with clock=True"
        tmp = clock.with_suffix(".tmp")
        tmp.write_text(offset + "\n")
        tmp.replace(clock)  # libfaketime must never read a half-written offset

    def start(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        self.victim = rng.choice(cluster.targets())
        offset = rng.choice(("+3600", "-3600"))
        self._set(cluster, offset)
        return {"node": self.victim, "offset": offset}

    def stop(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        self._set(cluster, "+0")
        return {"node": self.victim}


class Failover:
    """The primary's machine lost: SIGKILL the primary and promote its standby (standby
    topology only; the next failover waits until the standby has caught up); ``stop`` restarts
    the old primary as the new one's standby (its unacknowledged tail quarantined, as
    docs/standby.md describes). The start's value names ``old`` and ``new``: the checker fences
    the old primary from then on."""

    name, breaks = "failover", True
    topologies = ("standby",)

    def __init__(self) -> None:
        self.old = self.new = ""

    def start(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        try:
            wait_until(cluster.caught_up, "the standby to catch up before a failover")
        except TimeoutError as e:  # say which node is gone, if one is: its log ends there
            raise TimeoutError(f"{e} ({cluster.states()})") from None
        self.old = cluster.primary
        self.new = next(n for n in sorted(cluster.nodes) if n != self.old)
        cluster.nodes[self.old].kill9()
        cluster.promote(self.new)
        return {"node": self.old, "old": self.old, "new": self.new}

    def stop(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        cluster.follow(self.old, self.new)
        cluster.nodes[self.old].start()
        return {"node": self.old}


class EtcdCut:
    """The ha topology's primary cut from etcd (its relay stops: no lease renewal, no leader
    key), while clients and the other nodes still reach it: it must stop acknowledging once its
    lease has run out, and another node takes over; ``stop`` heals the relay, and the old
    primary rejoins as a standby."""

    name, breaks = "etcd-cut", True
    topologies = ("ha",)

    def __init__(self) -> None:
        self.victim = ""

    def start(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        self.victim = rng.choice(cluster.targets())
        cluster.cut_etcd(self.victim)
        return {"node": self.victim}

    def stop(self, cluster: Cluster, rng: random.Random) -> dict[str, Any]:
        cluster.heal_etcd(self.victim)
        return {"node": self.victim}


NEMESES: dict[str, type[Kill9] | type[Pause] | type[Partition] | type[FullDisk] | type[ClockJump]
              | type[Failover] | type[EtcdCut]] = {
    n.name: n for n in (Kill9, Pause, Partition, FullDisk, ClockJump, Failover, EtcdCut)}
