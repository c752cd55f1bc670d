"""What a node does about the leadership it sees (pure: no etcd, no server, no clock).

The lease keeper says who holds the leader key; the node says what it is now. ``decide`` maps
the two to one action, so every role change follows one table:

| this node is     | leader key says      | action                                  |
|------------------|----------------------|-----------------------------------------|
| primary          | nobody / someone else| fence now (no acknowledgement after);   |
|                  |                      | then follow the new leader once known   |
| primary          | this node            | nothing                                 |
| standby/starting | this node            | promote, at the key's epoch             |
| standby/starting | someone else         | follow it (again, if it is a new one)   |
| standby/starting | nobody               | wait (the keeper campaigns if eligible) |
| fenced           | someone else         | follow it (rejoin, tail set aside)      |

>>> me = NodeState("standby", following="a:1")
>>> decide(me, Leadership("a", {"replication": "a:1"}, 9, mine=False))
Stay()
>>> decide(me, Leadership("c", {"replication": "c:1"}, 12, mine=False))
Follow(address='c:1', epoch=12)
>>> decide(me, Leadership("b", {}, 14, mine=True))
Promote(epoch=14)
>>> decide(NodeState("primary"), None)
Fence(why='the leader lease is lost')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stalkd.ha.keeper import Leadership

__all__ = ["NodeState", "Stay", "Promote", "Follow", "Fence", "Action", "SyncStep", "decide", "eligible",
           "next_sync_set"]


@dataclass(frozen=True)
class NodeState:
    """``role``: ``primary``, ``standby``, ``starting`` (no role yet) or ``fenced``;
    ``following``: the replication address a standby follows."""

    role: str
    following: str | None = None


@dataclass(frozen=True)
class Stay:
    pass


@dataclass(frozen=True)
class Promote:
    epoch: int


@dataclass(frozen=True)
class Follow:
    address: str
    epoch: int


@dataclass(frozen=True)
class Fence:
    why: str


Action = Stay | Promote | Follow | Fence


def decide(node: NodeState, leader: Leadership | None) -> Action:
    if node.role == "primary":
        if leader is None:
            return Fence("the leader lease is lost")
        if not leader.mine:
            return Fence(f"{leader.name} holds the leader key (epoch {leader.epoch})")
        return Stay()
    if leader is None:
        return Stay()
    if leader.mine:
        return Promote(leader.epoch)
    address = str(leader.info.get("replication", ""))
    if not address:
        return Stay()  # a leader that published no address: nothing to follow yet
    if node.role == "standby" and node.following == address:
        return Stay()
    return Follow(address, leader.epoch)


def eligible(me: str, sync_members: tuple[str, ...] | None, sync_standbys: int) -> bool:
    """Whether node ``me`` may campaign for the leader key. With ``--sync-standbys N`` > 0 only
    a node in the cluster's sync set (the leader and the standbys it counted toward N, kept in
    etcd before they counted) provably holds every acknowledged record; with 0, loss of the
    unreplicated tail is what the cluster was configured to accept. No sync set yet: a new
    cluster, where nothing was acknowledged under a leader.

    >>> eligible("b", ("a", "b"), 1), eligible("c", ("a", "b"), 1), eligible("c", ("a",), 0)
    (True, False, True)
    """
    if sync_standbys <= 0 or sync_members is None:
        return True
    return me in sync_members


@dataclass(frozen=True)
class SyncStep:
    """One look of the primary at its standbys: the gate counts ``count`` first, then etcd's
    set is written as ``write`` (the standbys; None: nothing to write), and once written the gate
    counts ``write`` alone."""

    count: frozenset[str]
    write: frozenset[str] | None


def next_sync_set(members: frozenset[str], acked: Mapping[str, int], end: int, need: int,
                  written: frozenset[str] | None) -> SyncStep:
    """The primary's sync set rule. ``members``: the standbys the gate counts now; ``acked``:
    each connected standby's acknowledged offset; ``end``: the log's end; ``written``: the set
    this leader last wrote in etcd (None: none yet in this term).

    A caught-up standby counts before it is written (every member holds every acknowledged
    change), until there are ``need``. Nothing is acknowledged with fewer than ``need`` members,
    so two sets are never written, since either would leave a cluster no node may lead without
    a person once this primary dies: the leader alone at the start of a term (the previous
    term's set, or none in a new cluster, still names nodes holding every acknowledged change),
    and a member that went away taken out on its own (it holds everything acknowledged until
    it is replaced, in the same write that names its replacement).

    >>> next_sync_set(frozenset(), {"b": 5}, 9, 1, None)  # b has not caught up: nothing written
    SyncStep(count=frozenset(), write=None)
    >>> next_sync_set(frozenset(), {"b": 9}, 9, 1, None)
    SyncStep(count=frozenset({'b'}), write=frozenset({'b'}))
    >>> next_sync_set(frozenset({"b"}), {}, 9, 1, frozenset({"b"}))  # b went away: it stays
    SyncStep(count=frozenset({'b'}), write=None)
    >>> step = next_sync_set(frozenset({"b"}), {"c": 9}, 9, 1, frozenset({"b"}))  # c replaces b
    >>> sorted(step.count), sorted(step.write or ())
    (['b', 'c'], ['c'])
    """
    kept = frozenset(n for n in members if n in acked)
    if len(kept) >= need:
        want = kept  # enough members left: one that went away is taken out of etcd, then the gate
        count = members
    else:
        add = frozenset(sorted(n for n, off in acked.items() if n not in members and off >= end)[: need - len(kept)])
        want = kept | add if add else members
        count = members | add
    if not want or want == written:
        return SyncStep(count, None)
    return SyncStep(count, want)
