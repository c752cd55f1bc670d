"""The cluster's sync set in etcd (Patroni's ``/sync`` key): the leader and the standbys it may
count toward ``--sync-standbys N``.

The leader writes the set *before* a standby counts (and a standby leaves it only once it no
longer counts), guarded by its own leader key, so a leader that has lost the key cannot write
it. A node outside the set never campaigns (``decide.eligible``): whatever the primary
acknowledged is on every member of the set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from stalkd.ha.etcd import Etcd

__all__ = ["SyncSet", "read_sync", "write_sync"]


@dataclass(frozen=True)
class SyncSet:
    leader: str
    epoch: int
    members: tuple[str, ...]  # the leader first
    revision: int = 0  # the leader key's create revision: the write is guarded by it


def read_sync(etcd: Etcd, key: str) -> SyncSet | None:
    kv = etcd.get(key)
    if kv is None:
        return None
    try:
        doc = json.loads(kv.value)
        return SyncSet(str(doc["leader"]), int(doc["epoch"]), tuple(str(m) for m in doc["members"]))
    except (ValueError, KeyError, TypeError):
        return None  # unreadable: treated as no set, so nobody is held back by garbage


def write_sync(etcd: Etcd, key: str, s: SyncSet, *, leader_key: str) -> bool:
    """Publish ``s`` if its leader still holds ``leader_key`` (the key created at
    ``s.revision``); whether it did."""
    doc = {"leader": s.leader, "epoch": s.epoch, "members": list(s.members)}
    return etcd.put_if(key, json.dumps(doc).encode(), guard=leader_key, guard_revision=s.revision)
