"""The lease keeper: campaigns for the cluster's leader key, renews its lease while it holds
it, and reports who leads.

One thread per node, so that a busy event loop cannot starve the renewals (and a stopped
process renews nothing: the point of the lease). ``step`` is one turn of that thread's loop,
callable from a test without the thread.

Ensures: ``may_acknowledge()`` is True only while this node holds the key under a lease that,
by this node's monotonic clock, etcd cannot yet have expired (``LeaseHold``); once it turns
False it stays False until the key is won again, with a new, larger epoch. ``on_change`` is
called (from the keeper's thread) each time the leadership this node sees changes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stalkd.ha.etcd import Etcd, EtcdError, KeyValue
from stalkd.ha.lease import DEFAULT_TTL, LeaseHold, default_margin, renew_every

__all__ = ["Leadership", "LeaseKeeper"]

log = logging.getLogger("stalkd.ha")


@dataclass(frozen=True)
class Leadership:
    """The key's holder as etcd has it: the node's ``name``, what it published (``info``: its
    addresses), its ``epoch`` (one more than the last leader's, allocated with the key in one
    transaction: a fencing token that only grows, small enough for the id bands of
    ``engine.replay.note_epoch``), whether this node holds it under its own lease (``mine``),
    and the key's create ``revision`` (what a write guarded by this leadership compares)."""

    name: str
    info: dict[str, Any]
    epoch: int
    mine: bool
    revision: int = 0


def _decode(kv: KeyValue, hold: LeaseHold | None) -> Leadership:
    try:
        info = json.loads(kv.value)
        name = str(info.get("name", "?"))
        epoch = int(info.get("epoch", 0))
    except (ValueError, AttributeError, TypeError):
        info, name, epoch = {}, "?", 0
    return Leadership(name, info, epoch, hold is not None and kv.lease == hold.lease, kv.create_revision)


class LeaseKeeper:
    """Keeps this node (``name``, publishing ``info``) in the race for ``key`` through ``etcd``.

    ``eligible()`` is asked before each campaign: a node that may not lead (a standby not in
    sync) never takes the key. ``poll`` is how often a follower looks at the key.
    """

    def __init__(self, etcd: Etcd, key: str, name: str, info: dict[str, Any], *,
                 counter: str | None = None,
                 ttl: int = DEFAULT_TTL, margin: float | None = None, poll: float = 0.5,
                 eligible: Callable[[], bool] = lambda: True,
                 on_change: Callable[[Leadership | None], None] = lambda _l: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.etcd = etcd
        self.key = key
        self.counter = counter or key.rsplit("/", 1)[0] + "/epoch-counter"
        self.name = name
        self.info = {**info, "name": name}
        self.ttl = ttl
        self.margin = default_margin(ttl) if margin is None else margin
        self.poll = poll
        self.eligible = eligible
        self.on_change = on_change
        self.clock = clock
        self._hold: LeaseHold | None = None
        self._next_renew = 0.0
        self.leader: Leadership | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- what the server asks ------------------------------------------------------------------

    def may_acknowledge(self) -> bool:
        """Whether this node may release an acknowledgement as primary right now."""
        hold = self._hold
        return hold is not None and hold.alive(self.clock())

    def time_left(self) -> float | None:
        """Seconds before this node must stop acknowledging (None: it does not hold the key)."""
        hold = self._hold
        return None if hold is None else max(0.0, hold.until - self.clock())

    # --- the loop ------------------------------------------------------------------------------

    def _see(self, leader: Leadership | None) -> None:
        if leader != self.leader:
            self.leader = leader
            self.on_change(leader)

    def _lose(self, why: str) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            log.error("lost the leader lease (%s): no more acknowledgements as primary", why)
        self._see(None)

    def step(self) -> float:
        """One turn: renew (holder) or look and campaign (follower). Seconds until the next."""
        now = self.clock()
        hold = self._hold
        if hold is not None:
            if not hold.alive(now):
                self._lose(f"not renewed since {now - hold.sent:.1f} s: {self.last_error or 'no answer'}")
                return 0.0
            if now < self._next_renew:
                return min(self._next_renew, hold.until) - now
            sent = self.clock()
            try:
                ttl = self.etcd.keepalive(hold.lease)
            except EtcdError as e:
                self.last_error = str(e)
                log.warning("lease renewal failed (%.1f s left): %s", hold.until - self.clock(), e)
                return min(renew_every(self.ttl) / 2, max(0.0, hold.until - self.clock()))
            if ttl <= 0:
                self._lose("etcd says the lease has expired")
                return 0.0
            self._hold = hold.renewed(sent, ttl)
            self._next_renew = sent + renew_every(ttl)
            self.last_error = None
            return max(0.0, self._next_renew - self.clock())
        try:
            current = self.etcd.get(self.key)
            if current is None and self.eligible():
                current = self._campaign()
        except EtcdError as e:
            self.last_error = str(e)
            log.warning("cannot read the leader key %s: %s", self.key, e)
            return self.poll
        self.last_error = None
        leader = None if current is None else _decode(current, self._hold)
        if leader is not None and leader.name == self.name and not leader.mine:
            # This node's key from before a restart: its lease is not ours, it ends on its own.
            leader = None
        self._see(leader)
        return self.poll

    def _campaign(self) -> KeyValue | None:
        sent = self.clock()
        lease, ttl = self.etcd.grant(self.ttl)
        won, kv, epoch = self.etcd.create_counting(self.key, self.info, lease, self.counter)
        if not won:
            self.etcd.revoke(lease)
            return kv
        assert kv is not None
        self._hold = LeaseHold(lease, sent, ttl, self.margin)
        self._next_renew = sent + renew_every(ttl)
        log.info("won the leader key %s at epoch %d (lease TTL %d s)", self.key, epoch, ttl)
        return kv

    def resign(self) -> None:
        """Stop acknowledging as primary, then give the key up (a planned switchover)."""
        hold, self._hold = self._hold, None
        if hold is None:
            return
        self._see(None)
        try:
            self.etcd.revoke(hold.lease)
        except EtcdError as e:  # the lease then expires on its own
            log.warning("could not revoke the leader lease: %s", e)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="stalkd-ha", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                delay = self.step()
            except Exception:  # a bug here must not end the renewals silently
                log.exception("lease keeper")
                delay = self.poll

    def stop(self, *, resign: bool = False) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if resign:
            self.resign()
