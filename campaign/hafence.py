"""A lease-loss fence run: the primary of a three-node ``--ha`` cluster loses its way to etcd,
another node takes the leader key and is promoted, and the old primary must acknowledge nothing
from the moment its lease ran out, even to a client that still talks to it alone.

Node ``a`` starts first, so it leads; it runs from a copy of the stalkd package made for the run
(``fence.source_tree``), with ``PLANTS`` applied if asked: a lease that ran out no longer holds
replies back (``AckGate``) nor refuses commands (``Role.refuses``), losing the leader key no
longer fences (``HaNode._apply``), and a verified newer epoch is ignored (``fence.PLANT``, since
the new primary tells its former one).
``b`` and ``c`` run the installed stalkd. ``--sync-standbys 0``: only the lease stops ``a``
acknowledging; what it acknowledged before is on its standbys, which keep streaming from it
for the seconds its lease still runs.

The caller gives each node's etcd address and a way to cut and heal one node's path to etcd
(the tests use ``tests/etcdserver.py``'s proxies). The history, checker and workload are the
campaign's; the promotion is recorded when the harness sees another node say ``role:
primary``, after which the checker's ``fenced-ack`` rule applies to ``a``.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

from campaign import checker
from campaign.cluster import Node, wait_until
from campaign.failover import acked_puts
from campaign.fence import PLANT, source_tree
from campaign.history import History, Op
from campaign.workload import Workload, WorkloadSpec, final_read

__all__ = ["PLANTS", "STALE_PUTS", "ha_fence_run"]

PLANTS = (
    PLANT,
    ("replication/authority.py",
     "        if self.lease is not None and not self.lease():\n"
     "            return 0  # at or below what is already released: nothing more goes out\n",
     "        pass  # planted by campaign.hafence: replies go out without a live lease\n"),
    ("server/hanode.py",
     "        if isinstance(action, Fence):\n",
     "        if isinstance(action, Fence) and not action:  # planted by campaign.hafence: never fenced\n"),
    ("replication/role.py",
     "            self.lease is not None and not self.lease())\n",
     "            False)  # planted by campaign.hafence: a lost lease refuses no command\n"),
)
NAMES = ("a", "b", "c")
STALE_PUTS = 5


def _stats(node: Node) -> dict[str, str]:
    from stalkd.client import Client

    with Client(node.address, timeout=3) as c:
        return {k: str(v) for k, v in c.stats().items()}


def _role(node: Node) -> str:
    try:
        return _stats(node).get("role", "")
    except (OSError, ValueError):
        return "down"


def ha_fence_run(directory: Path, plant: bool, etcd: dict[str, str], cut: Callable[[str], None],
                 heal: Callable[[str], None], *, seed: int = 1) -> tuple[list[Op], list[checker.Anomaly]]:
    """Run it in ``directory`` (emptied first): ``etcd`` maps each of ``NAMES`` to its etcd
    address, ``cut(name)``/``heal(name)`` cut and heal that node's path to etcd."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    tree = source_tree(directory / "src", PLANTS if plant else ())
    secret = directory / "replication.secret"
    secret.write_text(os.urandom(24).hex() + "\n")
    secret.chmod(0o600)
    nodes = {n: Node(n, directory / n / "data", ["-s", "1048576", "--ha", etcd[n], "--name", n, "--ha-ttl", "2",
                                                 "--sync-standbys", "0", "--replication-secret", str(secret)],
                     pythonpath=tree if n == "a" else None)
             for n in NAMES}
    history = History(directory / "history.jsonl")
    rng = random.Random(seed)
    try:
        nodes["a"].start()
        wait_until(lambda: _role(nodes["a"]) == "primary", "a to lead")
        for n in ("b", "c"):
            nodes[n].start()

        def settled() -> bool:
            try:
                st = _stats(nodes["a"])
            except (OSError, ValueError):
                return False
            return int(st.get("standbys", 0)) >= 2 and int(st.get("standby-lag", 1)) == 0

        wait_until(settled, "b and c to follow a", timeout=90)
        addresses = [nodes[n].address for n in NAMES]
        names = {nodes[n].address: n for n in NAMES}
        spec = WorkloadSpec(producers=2, workers=1, app_workers=0, tubes=1, delayed=0.0)
        load = Workload(history, addresses, names, spec, rng.randrange(1 << 30))
        load.start()
        wait_until(lambda: acked_puts(history) >= 20, "puts before the fault")
        ev = history.invoke("nemesis", "start", {"nemesis": "lose-lease", "breaks": True})
        cut("a")
        history.complete(ev, "ok", {"node": "a"})
        ev = history.invoke("nemesis", "promote", {"old": "a"})
        wait_until(lambda: any(_role(nodes[n]) == "primary" for n in ("b", "c")), "a new primary", timeout=90)
        new = next(n for n in ("b", "c") if _role(nodes[n]) == "primary")
        history.complete(ev, "ok", {"old": "a", "new": new})
        # the load carries on: against the new primary, or, where the old one still takes
        # writes (the planted bug), wherever its clients are
        since = acked_puts(history)
        wait_until(lambda: acked_puts(history) >= since + 10, "the load to carry on after the promotion", timeout=90)
        load.put_to(nodes["a"].address, "stale-client", STALE_PUTS)
        load.stop()
        heal("a")
        slack = sum(1 for op in history.ops() if op.f == "put" and not op.ok) + 10
        final_read(history, nodes[new].address, slack)
    finally:
        history.close()
        for node in nodes.values():
            node.signal(signal.SIGCONT)
            node.stop()
    ops = history.ops()
    return ops, checker.check(ops)
