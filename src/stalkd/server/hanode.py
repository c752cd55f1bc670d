"""A server under ``--ha``: the lease keeper's view of the cluster turned into role changes.

Start-up (``learn_role``, before recovery): the node waits until etcd says who leads, or wins
the key itself, and starts as that leader's standby (``--standby-of`` its published address,
with the usual catch-up that sets aside a tail the leader never had) or as the primary.
While serving (``HaNode``), ``stalkd.ha.decide`` maps each change the keeper reports to one
action on the loop: a standby that wins promotes in place, at the leader's epoch; a primary that
loses the lease fences itself at once; any other change (a new leader to follow, a fenced node
that can rejoin) stops the server (``serve.EXIT_REJOIN``) and ``stalkd serve`` starts again in the
same process (exec), where ``learn_role`` decides afresh.

Ensures: no reply is released as primary unless the lease is alive at the moment of release
(``replication.authority``: the lease asked at each release, on the monotonic clock); the epoch of a
promotion is the one allocated with the leader key in etcd, so epochs stay fencing tokens
across nodes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from stalkd.engine.handover import epoch_record
from stalkd.ha import Etcd, EtcdError, Leadership, LeaseKeeper, parse_cluster
from stalkd.ha.address import ClusterAddress
from stalkd.ha.cluster import (
    clear_switchover,
    latest_epoch,
    publish_epoch,
    publish_member,
    switchover_target,
)
from stalkd.ha.decide import Fence, Follow, NodeState, Promote, decide, next_sync_set
from stalkd.ha.syncset import SyncSet, read_sync, write_sync
from stalkd.server.settings import Config

__all__ = ["start_keeper", "learn_role", "HaNode", "reexec"]

SYNC_SET_EVERY = 0.2  # seconds between the primary's looks at its standbys for the sync set
SWITCHOVER_POLL = 0.5  # seconds between the primary's looks at the switchover key
SWITCHOVER_WAIT = 10.0  # seconds a switchover waits for the standbys before it is given up
RECORD_RETRY = 0.1  # seconds between tries to record a promotion's epoch in etcd


log = logging.getLogger("stalkd.ha")


def start_keeper(cfg: Config, advertise: str, my_epoch: Callable[[], int]) -> LeaseKeeper:
    """The node's lease keeper. It campaigns only when its log is of the cluster's newest epoch
    (``my_epoch()``: a node that missed a term never leads) and, while a switchover is asked,
    only if it is the switchover's target."""
    assert cfg.ha is not None and cfg.name is not None
    addr = parse_cluster(cfg.ha)
    etcd = Etcd(addr)
    me = cfg.name
    said = [0.0, 0.0]

    def eligible() -> bool:
        to = switchover_target(etcd, addr)
        if to is not None and to != me:
            return False
        if cfg.sync_standbys > 0:
            sync = read_sync(etcd, addr.key("sync"))
            if sync is not None and me not in sync.members:
                if time.monotonic() - said[1] > 30:
                    said[1] = time.monotonic()
                    log.warning("not campaigning for the lease: this node is not in the sync set "
                                "(%s), so it may lack acknowledged changes", ", ".join(sync.members))
                return False
        newest, mine = latest_epoch(etcd, addr), my_epoch()
        if mine < newest:
            if time.monotonic() - said[0] > 30:
                said[0] = time.monotonic()
                log.warning("not campaigning for the lease: this node's log is of epoch %d, the "
                            "cluster's newest is %d (it missed a term; it follows a node that "
                            "has it)", mine, newest)  # fmt: skip
            return False
        return True

    return LeaseKeeper(etcd, addr.key("leader"), me, {"replication": advertise, "client": advertise},
                       ttl=cfg.ha_ttl, eligible=eligible)


def learn_role(cfg: Config, keeper: LeaseKeeper) -> Config:
    """Block until the cluster has a leader (this node, if it wins); ``cfg`` with
    ``standby_of`` set when another node leads. Logs while etcd cannot be reached."""
    last_log = 0.0
    published = False
    while True:
        if not published:
            try:
                addr = parse_cluster(str(cfg.ha))
                publish_member(keeper.etcd, addr, keeper.name, keeper.info)
                published = True
            except EtcdError as e:
                keeper.last_error = str(e)
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

    def __init__(self, keeper: LeaseKeeper, cluster: ClusterAddress, role: Any, standby: Any,
                 wal: Any, engine: Any, rejoin: Callable[[str], None], *, following: str | None,
                 caught_up: Callable[[], bool] = lambda: True) -> None:
        self.caught_up = caught_up  # every connected standby holds the whole log (switchover)
        self.authority: Any = None
        self.replicas: Any = None
        self._sync_task: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.keeper = keeper
        self.cluster = cluster  # etcd's members, TLS settings included, and the key prefix
        self.following = following  # the leader's published address this standby follows
        self.role = role
        self.standby = standby
        self.wal = wal
        self.engine = engine
        self.rejoin = rejoin
        self.fenced = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._term: tuple[int, int] | None = None  # (epoch, revision) lead() left to record

    def _etcd(self) -> Etcd:
        """A client of its own (one is not shared between threads), as the keeper's is made."""
        return Etcd(self.cluster, timeout=self.keeper.etcd.timeout)

    def install(self, authority: Any, replicas: Any) -> None:
        """Every release asks the lease (``replication.authority``: the one place that decides
        whether to acknowledge); losing it fences through the same place. With
        ``--sync-standbys N`` only the standbys of the cluster's sync set count (none until the
        first is named), so that whichever of them takes over has every acknowledged change."""
        self.authority = authority
        self.replicas = replicas
        authority.set_lease(self.keeper.may_acknowledge)
        self.role.lease = self.keeper.may_acknowledge  # and no job handed out without it
        if replicas is not None and replicas.gate is not None:
            replicas.gate.set_members(frozenset())

    async def _keep_sync_set(self) -> None:
        """The primary's side of the sync set, by ``decide.next_sync_set``'s rule: a standby
        counts before etcd names it, and etcd stops naming one before it stops counting."""
        reps = self.replicas
        gate = reps.gate
        loop = asyncio.get_running_loop()
        etcd = self._etcd()
        written: frozenset[str] | None = None
        waiting_said = False
        away: frozenset[str] = frozenset()  # members already said to be away
        while True:
            await asyncio.sleep(SYNC_SET_EVERY)
            leader = self.keeper.leader
            if self.fenced or self.role.standby or leader is None or not leader.mine:
                continue
            members = gate.members or frozenset()
            acked = {s.name: s.acked for s in list(reps.senders) if s.name and s.streaming}
            for n in sorted(members - acked.keys() - away):
                log.warning("sync set: standby %s went away; it stays in the set, and no change is "
                            "acknowledged, until it is back or a caught-up standby replaces it", n)
            away = members - acked.keys()
            step = next_sync_set(members, acked, reps.log.next_offset, gate.need, written)
            self._count(step.count)  # first: acknowledgements now need them too
            if step.write is None:
                if written is None and not step.count and not waiting_said:
                    waiting_said = True
                    log.info("sync set: waiting for %d standby(s) to catch up; no change is "
                             "acknowledged until then", gate.need)  # fmt: skip
                continue
            doc = SyncSet(self.keeper.name, leader.epoch, (self.keeper.name, *sorted(step.write)),
                          leader.revision)
            try:
                ok = await loop.run_in_executor(None, functools.partial(
                    write_sync, etcd, self.cluster.key("sync"), doc, leader_key=self.keeper.key))
            except EtcdError as e:
                log.warning("could not write the sync set %s: %s", sorted(step.write), e)
                continue
            if not ok:
                continue  # no longer the leader: the keeper says so next
            written = step.write
            self._count(step.write)  # out of etcd's set first, then out of the gate
            log.info("sync set: %s", ", ".join(doc.members))

    def _count(self, members: frozenset[str]) -> None:
        """The standbys whose acknowledgements the gate needs; held replies it frees go out."""
        gate = self.replicas.gate
        if gate.members == members:
            return
        before = gate.replicated
        gate.set_members(members)
        if gate.replicated != before:
            self.replicas.on_replicated()

    def status(self) -> dict[str, int | float | str]:
        """``stats`` fields: the cluster's leader as this node sees it, and its own lease."""
        leader = self.keeper.leader
        left = self.keeper.time_left()
        return {"cluster-node": self.keeper.name,
                "cluster-leader": leader.name if leader is not None else "",
                "cluster-epoch": leader.epoch if leader is not None else 0,
                "lease-left-ms": -1 if left is None else int(left * 1000)}

    def lead(self) -> None:
        """At start as the leader: the log's epoch becomes the leader's (a fencing token), and
        nothing is acknowledged until etcd records it (``start`` runs ``_record_term``), for the
        reason a promotion waits: a node that missed this term must see a newer epoch than its
        own before it campaigns."""
        leader = self.keeper.leader
        assert leader is not None and leader.mine
        if self.role.state.epoch < leader.epoch:
            self.wal.write([epoch_record(self.engine, leader.epoch, self.wal.log.next_offset, time.time())])
            self.wal.sync()
        if self.authority is not None:
            self.authority.withhold(f"epoch {leader.epoch} is not recorded in etcd yet", cause="term")
        self._term = (leader.epoch, leader.revision)

    def _record_term(self, epoch: int, revision: int) -> None:
        """After a promotion or ``lead`` (on a thread: etcd blocks): record the new epoch in etcd, then let
        acknowledgements flow. Acknowledged before, a write of this term could be lost to a node
        that missed the term: with this node gone before the record, that node would see no
        newer epoch than its own and campaign. Retried while the lease lasts; a lost key or
        lease fences this node through the keeper."""
        while self.keeper.may_acknowledge() and not self.fenced:
            try:
                if not publish_epoch(self._etcd(), self.cluster, epoch, revision):
                    return
            except EtcdError as e:
                log.warning("could not record epoch %d in etcd: %s; retrying", epoch, e)
                time.sleep(RECORD_RETRY)
                continue
            loop, authority = self._loop, self.authority
            if authority is not None and loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(functools.partial(authority.allow, f"epoch {epoch} is recorded in etcd",
                                                            cause="term"))
            return

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.keeper.on_change = self._changed
        self.keeper.start()
        self._changed(self.keeper.leader)  # what happened between learn_role and now
        if self._term is not None:  # lead() at start: record its epoch off the loop (etcd blocks)
            epoch, revision = self._term
            self._loop_run(lambda: self._record_term(epoch, revision))
        self._task = self._loop.create_task(self._watch_switchover())
        if self.replicas is not None and self.replicas.gate is not None:
            self._sync_task = self._loop.create_task(self._keep_sync_set())

    async def _watch_switchover(self) -> None:
        """On the primary: a planned switchover asked in etcd (``stalkd cluster switchover``)."""
        loop = asyncio.get_running_loop()
        etcd = self._etcd()
        while True:
            await asyncio.sleep(SWITCHOVER_POLL)
            if self.fenced or self.role.standby or not self.keeper.may_acknowledge():
                continue
            try:
                to = await loop.run_in_executor(None, switchover_target, etcd, self.cluster)
            except EtcdError:
                continue
            if to is None or to == self.keeper.name:
                continue
            await self._hand_over(to)
            return

    async def _hand_over(self, to: str) -> None:
        """Refuse new changes, let every held reply out once the standbys hold it, then give the
        lease up so that ``to`` (the only node allowed to campaign now) takes it."""
        log.warning("switchover to %s asked: refusing new changes, handing over once the standbys "
                    "hold everything", to)  # fmt: skip
        # New changes get NOT_PRIMARY (not persisted: an abandoned switchover lifts it).
        self.role.fenced = self.role.state.epoch + 1
        deadline = time.monotonic() + SWITCHOVER_WAIT
        while not self.caught_up() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if not self.caught_up():
            log.error("switchover to %s: the standbys did not catch up in %.0f s; staying primary",
                      to, SWITCHOVER_WAIT)  # fmt: skip
            self.role.fenced = 0
            return
        self.fenced = True
        self.role.fenced = 0
        if self.authority is not None:
            self.authority.fence(f"switched over to {to}")
        await asyncio.get_running_loop().run_in_executor(None, self.keeper.resign)
        self.rejoin(f"switched over to {to}")

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
            if self.authority is not None:  # every connection holding a reply is cut now
                self.authority.fence(action.why)
            if leader is not None:
                self.role.saw(leader.epoch)
            log.error("fenced: %s; no more acknowledgements as primary", action.why)
            if leader is not None:
                self.rejoin(f"following the new leader {leader.name}")
        elif isinstance(action, Promote):
            if self.standby is None:
                self.rejoin("won the leader key without a standby to promote")
                return
            log.warning("won the leader key at epoch %d: promoting", action.epoch)
            if self.authority is not None:  # released once etcd records the term (_record_term)
                self.authority.withhold(f"epoch {action.epoch} is not recorded in etcd yet", cause="term")
            self.standby.promote(epoch=action.epoch)
            self._loop_run(self._clear_switchover)
            revision = leader.revision if leader is not None else 0
            self._loop_run(lambda: self._record_term(action.epoch, revision))
        elif isinstance(action, Follow):
            self.rejoin(f"the leader is now at {action.address} (epoch {action.epoch})")

    def _loop_run(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None:
            loop.run_in_executor(None, fn)

    def _clear_switchover(self) -> None:
        """A switchover that brought this node here is done (run on a thread: etcd blocks)."""
        try:
            clear_switchover(self._etcd(), self.cluster)
        except EtcdError as e:
            log.warning("could not clear the switchover key: %s", e)

    def stop(self) -> None:
        """Stop renewing; a primary gives the key up at once (its replies are out by now), so
        a standby takes over without waiting out the lease."""
        self.keeper.stop(resign=True)


def reexec(listener_fd: int | None) -> None:
    """Start ``stalkd serve`` again in this process, keeping the listener ``listener_fd``
    (passed as systemd would: fd 3, ``LISTEN_FDS``), so clients find the same address; with
    None, the new start binds its listeners from its flags. Returns only by raising (OSError:
    the exec failed; the caller says so)."""
    import os
    import sys

    if listener_fd is None:
        os.environ.pop("LISTEN_FDS", None)
        os.environ.pop("LISTEN_PID", None)
    else:
        os.dup2(listener_fd, 3)
        os.set_inheritable(3, True)
        os.environ["LISTEN_FDS"] = "1"
        os.environ["LISTEN_PID"] = str(os.getpid())
    for h in logging.getLogger("stalkd").handlers:  # what this start said comes first
        h.flush()
    os.execv(sys.executable, sys.orig_argv)
