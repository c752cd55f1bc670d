"""``stalkd cluster``: an automatic-failover cluster (``stalkd serve --ha``) as etcd and its
nodes see it, and planned switchovers.

``status`` reads the leader key, its lease and the members from etcd, then asks each node for
its own view over the protocol (role, epoch, lag); a node that does not answer is ``down``.
``switchover --to NODE`` asks the primary to hand over: it refuses new changes, waits until its
standbys hold everything it acknowledged, and gives up the lease, which only NODE may take.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from stalkd.ha import Etcd, EtcdError, parse_cluster
from stalkd.ha.cluster import ask_switchover, clear_switchover, lease_time_left, members

__all__ = ["main"]

_EPILOG = """examples:
  stalkd cluster status etcd://10.0.0.5:2379/stalkd/shop
  stalkd cluster switchover etcd://10.0.0.5:2379/stalkd/shop --to node-b"""


def _node_view(address: str, timeout: float) -> dict[str, Any]:
    import stalkd
    from stalkd.client import errors

    try:
        with stalkd.Client(address, timeout=timeout) as c:
            s = dict(c.stats())
    except (errors.ClientConnectionError, errors.BeanstalkError, OSError) as e:
        return {"role": "down", "error": str(e) or type(e).__name__}
    lag = s.get("primary-lag") if s.get("role") == "standby" else s.get("standby-lag")
    return {"role": s.get("role"), "epoch": s.get("epoch"), "lag": lag, "standbys": s.get("standbys", 0)}


def status(cluster: str, *, timeout: float = 2.0) -> dict[str, Any]:
    """The cluster's state: leader, its lease, and each member's own view."""
    addr = parse_cluster(cluster)
    etcd = Etcd(addr, timeout=timeout)
    leader_kv = etcd.get(addr.key("leader"))
    leader: dict[str, Any] | None = None
    if leader_kv is not None:
        info = json.loads(leader_kv.value)
        leader = {"name": info.get("name"), "epoch": info.get("epoch"),
                  "lease_left_s": lease_time_left(etcd, leader_kv.lease)}
    nodes = {}
    for name, info in sorted(members(etcd, addr).items()):
        where = str(info.get("client", ""))
        nodes[name] = {"address": where, **(_node_view(where, timeout) if where else {"role": "?"})}
    return {"cluster": cluster, "leader": leader, "nodes": nodes}


def _print_status(st: dict[str, Any]) -> None:
    lead = st["leader"]
    print(f"cluster {st['cluster']}")
    if lead is None:
        print("leader: none (no node holds the lease now)")
    else:
        left = "?" if lead["lease_left_s"] is None else f"{lead['lease_left_s']} s"
        print(f"leader: {lead['name']} (epoch {lead['epoch']}), lease {left} left")
    rows = [("NODE", "ROLE", "ADDRESS", "EPOCH", "LAG (records)")]
    for name, n in st["nodes"].items():
        lag = n.get("lag")
        rows.append((name, str(n["role"]), n["address"], str(n.get("epoch", "-")),
                     "-" if lag is None or n["role"] == "primary" else str(lag)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="stalkd cluster", description="An automatic-failover cluster "
                                "(stalkd serve --ha) as etcd and its nodes see it; planned switchovers.",
                                epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True, metavar="{status,switchover}")
    s = sub.add_parser("status", help="roles, epochs, lag, the lease holder and its time left")
    s.add_argument("cluster", help="the cluster address: etcd://HOST:PORT,.../stalkd/CLUSTER")
    s.add_argument("--json", action="store_true", help="print JSON")
    w = sub.add_parser("switchover", help="hand the primary role to another node, losing nothing")
    w.add_argument("cluster", help="the cluster address: etcd://HOST:PORT,.../stalkd/CLUSTER")
    w.add_argument("--to", required=True, metavar="NODE", help="the node to become primary")
    w.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                   help="give up after this long (default 30)")
    ns = p.parse_args(list(argv))
    try:
        if ns.what == "status":
            st = status(ns.cluster)
            if ns.json:
                print(json.dumps(st, indent=2))
            else:
                _print_status(st)
            return 0
        return _switchover(ns.cluster, ns.to, ns.wait)
    except ValueError as e:
        print(f"stalkd cluster: {e}", file=sys.stderr)
        return 2
    except EtcdError as e:
        print(f"stalkd cluster: {e}", file=sys.stderr)
        return 3


def _switchover(cluster: str, to: str, wait: float) -> int:
    addr = parse_cluster(cluster)
    etcd = Etcd(addr)
    st = status(cluster)
    node = st["nodes"].get(to)
    if node is None:
        print(f"stalkd cluster: no node {to!r} in {cluster} (nodes: {', '.join(st['nodes']) or 'none'})",
              file=sys.stderr)
        return 2
    if st["leader"] is not None and st["leader"]["name"] == to:
        print(f"{to} is already the primary (epoch {st['leader']['epoch']})")
        return 0
    if node["role"] != "standby":
        print(f"stalkd cluster: {to} is {node['role']}, not a standby that can take over", file=sys.stderr)
        return 1
    if not ask_switchover(etcd, addr, to):
        print("stalkd cluster: a switchover is already under way (or was abandoned: "
              f"etcdctl del {addr.key('switchover')})", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < wait:
            kv = etcd.get(addr.key("leader"))
            doc = json.loads(kv.value) if kv is not None else {}
            if doc.get("name") == to:
                print(f"switched over: {to} is the primary (epoch {doc.get('epoch')}) "
                      f"after {time.monotonic() - t0:.1f} s")
                return 0
            time.sleep(0.1)
    finally:
        clear_switchover(etcd, addr)
    print(f"stalkd cluster: {to} did not become primary within {wait:.0f} s; the switchover is "
          "withdrawn (the primary stays, or the cluster elects as usual)", file=sys.stderr)
    return 1
