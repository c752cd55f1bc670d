"""A fence run: the primary is isolated, its standby promoted, and the old primary, once the new
one has told it of the newer epoch, must acknowledge nothing more, even to a client that still
talks to it alone.

The old primary ``p`` runs from a copy of the stalkd source tree made for the run (``tree``),
optionally with ``PLANT`` applied: ``Role.saw`` returns at once, so a verified claim of a newer
epoch is ignored (the planted "fence ignored"). The standby ``s`` runs the installed stalkd.
``p`` replicates asynchronously (``--sync-standbys 0``), so once cut off from its standby only
the fence stops it acknowledging; nothing it acknowledged before is lost, because it is cut off
from the clients first and from its standby only once the standby holds its whole log.

1. load on both addresses; the clients cut from ``p``; wait until ``p`` (asked from ``s``'s
   namespace) has no standby lag; ``p`` cut from ``s`` too (``p`` isolated);
2. ``s`` promoted (SIGUSR2), recorded as a promotion (``old``, ``new``): from then on the
   checker's ``fenced-ack`` rule applies to ``p``;
3. the ``p``-``s`` link healed: the new primary tells ``p`` of its epoch (``standby.fence``);
   the harness waits (bounded) until ``p`` says ``role: fenced``, then heals the clients' link;
4. once the load has puts acknowledged by ``s``, a stale client pinned to ``p``'s address alone
   puts a few jobs; the final read is taken from ``s``.

Unpatched, ``p`` answers ``NOT_PRIMARY`` and the history is clean. Patched, it acknowledges the
stale client's puts: ``fenced-ack`` (and ``lost``: the new primary never had them).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import stalkd
from campaign import checker
from campaign.cluster import Cluster, wait_until
from campaign.failover import loaded
from campaign.history import History, Op
from campaign.net import CLIENT, NamespaceNet
from campaign.workload import final_read

__all__ = ["PLANT", "fence_run", "source_tree"]

# (file under stalkd/, text there, its replacement): a verified newer epoch changes nothing
PLANT = ("replication/role.py",
         '        """A newer epoch than ours is known to exist (verified): this server stops leading."""\n',
         '        """A newer epoch than ours is known to exist (verified): this server stops leading."""\n'
         "        return  # planted by campaign.fence: the fence is ignored\n")
FENCE_WAIT = 15.0  # seconds for the old primary to say it is fenced (told every second once healed)
STALE_PUTS = 5


def source_tree(into: Path, plants: Sequence[tuple[str, str, str]] = ()) -> Path:
    """A copy of the installed stalkd package (compiled twins included) under ``into``, with
    each of ``plants`` (file under ``stalkd/``, text there once, its replacement) applied; the
    directory to put on ``PYTHONPATH``."""
    src = Path(stalkd.__file__).parent
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(src, into / "stalkd", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, old, new in plants:
        f = into / "stalkd" / rel
        text = f.read_text()
        if text.count(old) != 1:
            raise RuntimeError(f"cannot plant the bug: {rel} no longer has {old.strip()!r} once")
        f.write_text(text.replace(old, new))
    return into


def _role_seen_by(net: NamespaceNet, cluster: Cluster, node: str, seen_by: str) -> dict[str, str]:
    """``node``'s stats as ``seen_by`` reaches it (the clients may be cut off from it)."""
    n = cluster.nodes[node]
    code = ("import json, sys; from stalkd.client import Client\n"
            "with Client(sys.argv[1], timeout=3) as c: print(json.dumps({k: str(v) for k, v in c.stats().items()}))")
    out = net.exec_in(seen_by, sys.executable, "-c", code, net.peer_address(node, n.port, seen_by))
    return dict(json.loads(out))


def fence_run(directory: Path, plant: bool, *, seed: int = 1) -> tuple[list[Op], list[checker.Anomaly], bool]:
    """Run it in ``directory``; the history's operations, the checker's anomalies and whether
    the old primary said it was fenced."""
    directory.mkdir(parents=True, exist_ok=True)
    tree = source_tree(directory / "src", (PLANT,) if plant else ())
    net = NamespaceNet(["p", "s"])  # OSError where namespaces cannot be made
    cluster = Cluster(directory, "standby", sync=0, net=net)
    cluster.nodes["p"].pythonpath = tree
    history = History(directory / "history.jsonl")
    rng = random.Random(seed)
    fenced = False
    try:
        load = loaded(cluster, history, rng, 20)
        ev = history.invoke("nemesis", "start", {"nemesis": "isolate-primary", "breaks": True})
        net.cut(CLIENT, "p")

        def replicated() -> bool:
            try:
                st = _role_seen_by(net, cluster, "p", "s")
            except (OSError, ValueError):
                return False
            return int(st.get("standbys", 0)) >= 1 and int(st.get("standby-lag", 1)) == 0

        wait_until(replicated, "the standby to hold everything the isolated primary wrote")
        net.cut("p", "s")
        history.complete(ev, "ok", {"node": "p"})
        ev = history.invoke("nemesis", "promote", {"old": "p", "new": "s"})
        cluster.promote("s")
        history.complete(ev, "ok", {"old": "p", "new": "s"})
        ev = history.invoke("nemesis", "stop", {"nemesis": "isolate-primary", "breaks": True})
        net.heal_between("p", "s")

        def told() -> bool:
            try:
                return _role_seen_by(net, cluster, "p", "s").get("role") == "fenced"
            except (OSError, ValueError):
                return False

        try:
            wait_until(told, "the old primary to say it is fenced", timeout=FENCE_WAIT, step=0.2)
            fenced = True
        except TimeoutError:
            pass  # the planted bug: it never says so; what it acknowledges is the checker's to find
        net.heal()
        history.complete(ev, "ok", {"node": "p", "fenced": fenced})
        wait_until(lambda: sum(1 for op in history.ops() if op.f == "put" and op.ok and op.node == "s") >= 10,
                   "the load to carry on against the new primary")
        load.put_to(cluster.client_address("p"), "stale-client", STALE_PUTS)
        load.stop()
        slack = sum(1 for op in history.ops() if op.f == "put" and not op.ok) + 10
        final_read(history, cluster.client_address("s"), slack)
    finally:
        history.close()
        cluster.close()
    ops = history.ops()
    return ops, checker.check(ops), fenced

