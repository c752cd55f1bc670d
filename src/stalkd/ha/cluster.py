"""The cluster's other keys in etcd, beside the leader key (``keeper``) and the sync set.

``<prefix>/members/<name>``: each node's published addresses, written at each start (no lease:
``stalkd cluster status`` shows a node that is down as down, not as absent).
``<prefix>/epoch-counter``: the last epoch number handed out, advanced in the transaction that
creates the leader key (``Etcd.create_counting``). ``<prefix>/epoch``: the newest epoch that
began, written by its leader once its EPOCH record is durable (guarded by its leader key): a
leader that died before that leaves the previous epoch the newest, so its peers stay eligible. A node whose log is of an older epoch missed a whole term and never campaigns: it
would bring back a past state and set aside everything since.
``<prefix>/switchover``: a planned switchover asked by ``stalkd cluster switchover --to NODE``;
while it is there only that node may campaign, and the primary hands over once its standbys
hold everything it acknowledged. The new leader removes it.
"""

from __future__ import annotations

import json
from typing import Any

from stalkd.ha.address import ClusterAddress
from stalkd.ha.etcd import Etcd

__all__ = ["publish_member", "members", "switchover_target", "ask_switchover", "clear_switchover",
           "lease_time_left", "publish_epoch", "latest_epoch"]


def publish_member(etcd: Etcd, addr: ClusterAddress, name: str, info: dict[str, Any]) -> None:
    etcd.put(addr.key(f"members/{name}"), json.dumps({**info, "name": name}).encode())


def members(etcd: Etcd, addr: ClusterAddress) -> dict[str, dict[str, Any]]:
    """Every node that ever started in the cluster: name -> what it published."""
    out: dict[str, dict[str, Any]] = {}
    for kv in etcd.get_prefix(addr.key("members/")):
        try:
            info = json.loads(kv.value)
        except ValueError:
            continue
        out[kv.key.rsplit("/", 1)[1]] = info if isinstance(info, dict) else {}
    return out


def switchover_target(etcd: Etcd, addr: ClusterAddress) -> str | None:
    kv = etcd.get(addr.key("switchover"))
    if kv is None:
        return None
    try:
        return str(json.loads(kv.value)["to"])
    except (ValueError, KeyError, TypeError):
        return None


def ask_switchover(etcd: Etcd, addr: ClusterAddress, to: str) -> bool:
    """Ask for a switchover to ``to``; False if one is already asked."""
    won, _ = etcd.create(addr.key("switchover"), json.dumps({"to": to}).encode())
    return won


def clear_switchover(etcd: Etcd, addr: ClusterAddress) -> None:
    etcd.call("kv/deleterange", {"key": _b64(addr.key("switchover"))})


def lease_time_left(etcd: Etcd, lease: int) -> int | None:
    """Seconds the lease has left as etcd sees it (None: expired or unknown)."""
    r = etcd.call("lease/timetolive", {"ID": str(lease)})
    ttl = int(r.get("TTL", -1))
    return ttl if ttl >= 0 else None


def _b64(s: str) -> str:
    import base64

    return base64.b64encode(s.encode()).decode()


def publish_epoch(etcd: Etcd, addr: ClusterAddress, epoch: int, revision: int) -> bool:
    """The leader of ``epoch`` (whose leader key was created at ``revision``) records that its
    epoch has begun (its EPOCH record is durable); False if it no longer holds the key."""
    return etcd.put_if(addr.key("epoch"), str(epoch).encode(), guard=addr.key("leader"),
                       guard_revision=revision)


def latest_epoch(etcd: Etcd, addr: ClusterAddress) -> int:
    kv = etcd.get(addr.key("epoch"))
    try:
        return int(kv.value) if kv is not None else 0
    except ValueError:
        return 0
