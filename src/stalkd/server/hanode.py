"""A server under ``--ha``: the lease keeper's view of the cluster turned into role changes.

Start-up (``learn_role``, before recovery): the node waits until etcd says who leads, or wins
the key itself, and starts as that leader's standby (``--standby-of`` its published address,
with the usual catch-up that sets aside a tail the leader never had) or as the primary.
While serving (``HaNode``), ``stalkd.ha.decide`` maps each change the keeper reports to one
action on the loop: a standby that wins promotes in place, at the key's epoch; a primary that
loses the lease fences itself at once; any other change (a new leader to follow, a fenced node
that can rejoin) stops the server (``serve.EXIT_REJOIN``) and ``stalkd serve`` starts again in the
same process (exec), where ``learn_role`` decides afresh.

Ensures: no reply is released as primary unless the lease is alive at the moment of release
(``ha.gate.LeaseGate`` on the barriers, checked on the monotonic clock); the epoch of a
promotion is the leader key's create revision, so epochs stay fencing tokens across nodes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from stalkd.engine.handover import epoch_record
from stalkd.ha import Etcd, Leadership, LeaseKeeper, parse_cluster
from stalkd.ha.decide import Fence, Follow, NodeState, Promote, decide
from stalkd.ha.gate import LeaseGate
from stalkd.server.settings import Config

__all__ = ["start_keeper", "learn_role", "HaNode", "reexec"]

log = logging.getLogger("stalkd.ha")


def start_keeper(cfg: Config, advertise: str) -> LeaseKeeper:
    assert cfg.ha is not None and cfg.name is not None
    addr = parse_cluster(cfg.ha)
    return LeaseKeeper(Etcd(addr), addr.key("leader"), cfg.name,
                       {"replication": advertise, "client": advertise}, ttl=cfg.ha_ttl)


def learn_role(cfg: Config, keeper: LeaseKeeper) -> Config:
    """Block until the cluster has a leader (this node, if it wins); ``cfg`` with
    ``standby_of`` set when another node leads. Logs while etcd cannot be reached."""
    last_log = 0.0
    while True:
        delay = keeper.step()
        leader = keeper.leader
        if leader is not None and leader.mine:
            log.info("cluster %s: this node (%s) leads, epoch %d", cfg.ha, cfg.name, leader.epoch)
            return cfg
        if leader is not None and leader.info.get("replication"):
            log.info("cluster %s: following %s at %s (epoch %d)", cfg.ha, leader.name,
                     leader.info["replication"], leader.epoch)  # fmt: skip
            return cfg.replace(standby_of=str(leader.info["replication"]))
        now = time.monotonic()
        if now - last_log > 5:
            last_log = now
            why = keeper.last_error or "no leader yet (a node may lead only once its lease is won)"
            log.warning("cluster %s: waiting to learn the primary: %s", cfg.ha, why)
        time.sleep(max(0.01, min(delay, 0.5)))


class HaNode:
    """The running side: ``role`` and ``standby`` (None on the primary) as serve.py built them;
    ``rejoin(why)`` stops the server for a new start."""

    def __init__(self, keeper: LeaseKeeper, role: Any, standby: Any, wal: Any, engine: Any,
                 rejoin: Callable[[str], None], *, following: str | None) -> None:
        self.keeper = keeper
        self.following = following  # the leader's published address this standby follows
        self.role = role
        self.standby = standby
        self.wal = wal
        self.engine = engine
        self.rejoin = rejoin
        self.fenced = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self, barriers: Any, replicas: Any) -> None:
        """Gate every release on the lease (with the sync standbys' gate inside)."""
        barriers.gate = LeaseGate(self.keeper.may_acknowledge, replicas.gate)
        barriers.end_offset = lambda: self.wal.log.next_offset

    def lead(self) -> None:
        """At start as the leader: the log's epoch becomes the key's (a fencing token)."""
        leader = self.keeper.leader
        assert leader is not None and leader.mine
        if self.role.state.epoch < leader.epoch:
            self.wal.write([epoch_record(self.engine, leader.epoch, self.wal.log.next_offset, time.time())])
            self.wal.sync()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.keeper.on_change = self._changed
        self.keeper.start()
        self._changed(self.keeper.leader)  # what happened between learn_role and now

    def _changed(self, leader: Leadership | None) -> None:  # the keeper's thread
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._apply, leader)

    def _state(self) -> NodeState:
        if self.fenced:
            return NodeState("fenced")
        if self.role.standby:
            return NodeState("standby", following=self.following)
        return NodeState("primary")

    def _apply(self, leader: Leadership | None) -> None:
        state = self._state()
        if state.role == "fenced":
            if leader is not None:
                self.rejoin(f"the cluster has a leader again ({leader.name}, epoch {leader.epoch})")
            return
        action = decide(state, leader)
        if isinstance(action, Fence):
            self.fenced = True
            self.role.saw(max(self.role.state.epoch + 1, leader.epoch if leader is not None else 0))
            log.error("fenced: %s; no more acknowledgements as primary", action.why)
            if leader is not None:
                self.rejoin(f"following the new leader {leader.name}")
        elif isinstance(action, Promote):
            if self.standby is None:
                self.rejoin("won the leader key without a standby to promote")
                return
            log.warning("won the leader key at epoch %d: promoting", action.epoch)
            self.standby.promote(epoch=action.epoch)
        elif isinstance(action, Follow):
            self.rejoin(f"the leader is now at {action.address} (epoch {action.epoch})")

    def stop(self) -> None:
        """Stop renewing; a primary gives the key up at once (its replies are out by now), so
        a standby takes over without waiting out the lease."""
        self.keeper.stop(resign=True)


def reexec(listener_fd: int) -> None:
    """Start ``stalkd serve`` again in this process, keeping the plain listener (passed as
    systemd would: fd 3, ``LISTEN_FDS``), so clients find the same address."""
    import os
    import sys

    os.dup2(listener_fd, 3)
    os.set_inheritable(3, True)
    os.environ["LISTEN_FDS"] = "1"
    os.environ["LISTEN_PID"] = str(os.getpid())
    logging.shutdown()
    os.execv(sys.executable, sys.orig_argv)
