"""Whether this primary may acknowledge a write now: the one place that decides.

A primary sends ``INSERTED``, ``DELETED``... once the write is durable (and, with
``--sync-standbys N``, held by N standbys). It must also still be *the* primary: a reply sent
after a newer epoch began is a promise the new primary does not keep. ``Authority`` holds that
decision and applies it to the server's barriers through one gate (``barriers.gate``):

- ``leading``: acknowledgements flow (the ``--sync-standbys`` gate alone decides);
- ``checking``: a restarted server whose directory had standbys acknowledges nothing until a
  peer has shown that no newer epoch exists (a standby of ours streams, following an epoch no
  newer than ours), or ``CHECK_WAIT`` seconds pass without anyone claiming one; replies wait
  meanwhile (the writes stay in the WAL) and go out when it ends;
- ``fenced``: a newer epoch was proven (``Role.claim``) or the lease was lost: nothing is
  acknowledged any more, for good. What was held (``Barriers.abandon``) becomes
  ``NOT_PRIMARY`` if the fence came while ``checking`` (no standby has streamed since the
  restart, so none holds those writes: nothing was applied anywhere that lives on); while
  ``leading`` a standby may hold them and be the new primary, so only "outcome unknown" is
  true, and each connection holding a reply is cut unanswered.

A lease (automatic failover, ``stalkd.ha``) plugs in here: ``set_lease(alive)`` makes every
release ask ``alive()`` at that moment (the holder's monotonic check: a process that wakes from
a pause longer than its lease releases nothing, before any thread has noticed), and ``fence()``
when the lease is lost or another holder is proven.

Ensures: ``may_acknowledge()`` is False from ``withhold``/``fence`` until ``allow`` of every
cause withheld (never after ``fence``); while False no reply waiting for a write made after that
moment is released; the state and its reason are what ``problems()`` reports (``/readyz``) and
the log says.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from stalkd.replication.gate import SyncGate

__all__ = ["Authority", "CHECK_WAIT"]

log = logging.getLogger("stalkd.replication")

CHECK_WAIT = 5.0  # seconds a restarted primary that had standbys waits to hear of a newer epoch
_ALL = 2**62


class Gate(Protocol):
    """What the barriers ask of a gate (``server.barriers.ReplicaGate``)."""

    replicated: int

    def note(self, batch: int, end_offset: int) -> None: ...


class Withholding(Protocol):
    """The server's barriers, as the authority sees them (``server.barriers.Barriers``)."""

    durable: int
    gate: Gate | None

    def replicated(self) -> None: ...
    def abandon(self, parts: tuple[bytes, ...] | None) -> None: ...


class AckGate:
    """``barriers.gate`` while acknowledgements may be withheld: the ``--sync-standbys`` gate's
    batch, frozen where withholding began."""

    def __init__(self, inner: SyncGate | None) -> None:
        self.inner = inner
        self.frozen: int | None = None
        self.lease: Callable[[], bool] | None = None  # set: nothing released while it says False

    @property
    def replicated(self) -> int:
        if self.frozen is not None:
            return self.frozen
        if self.lease is not None and not self.lease():
            return 0  # at or below what is already released: nothing more goes out
        return self.inner.replicated if self.inner is not None else _ALL

    @replicated.setter
    def replicated(self, value: int) -> None:  # pragma: no cover - the barriers only read it
        raise AttributeError("the acknowledgement gate moves through its authority")

    def note(self, batch: int, end_offset: int) -> None:
        if self.inner is not None:
            self.inner.note(batch, end_offset)


class Authority:
    def __init__(self, barriers: Withholding, sync_gate: SyncGate | None, refusal: bytes) -> None:
        """``refusal``: what held replies become when fenced before a standby streamed
        (NOT_PRIMARY)."""
        self.barriers = barriers
        self.refusal = (refusal,)
        self.gate = AckGate(sync_gate)
        self.state = "leading"
        self.waiting: dict[str, str] = {}  # what a "checking" state waits for: cause -> why
        self._fenced_why = ""
        self._install()

    @property
    def reason(self) -> str:
        """Why writes are not acknowledged ("" while leading)."""
        if self.state == "fenced":
            return self._fenced_why
        return "; ".join(self.waiting.values())

    def may_acknowledge(self) -> bool:
        return self.state == "leading"

    def _install(self) -> None:
        # Without a sync gate and while leading the barriers need no gate at all (their
        # compiled path runs only then); with one, while leading and without a lease, the sync
        # gate itself (what this one would answer: two Python calls fewer per batch).
        g = self.gate
        if g.frozen is not None or g.lease is not None:
            self.barriers.gate = g
        else:
            self.barriers.gate = g.inner

    def set_lease(self, alive: Callable[[], bool]) -> None:
        """From now on a reply is released only while ``alive()`` (asked at that moment)."""
        self.gate.lease = alive
        self._install()

    def withhold(self, why: str, cause: str = "restart") -> None:
        """Acknowledge nothing until ``allow`` of every cause withheld: a restarted primary's
        check for a newer epoch ("restart"), a new term's record of its epoch in etcd ("term").
        Both can be pending at once (a restarted primary that leads a new epoch); lifting one
        must not lift the other."""
        if self.state == "fenced" or cause in self.waiting:
            return
        self.waiting[cause] = why
        log.warning("not acknowledging writes yet: %s", why)
        if self.state == "checking":
            return
        self.state = "checking"
        self.gate.frozen = self.barriers.durable
        self._install()

    def allow(self, why: str, cause: str = "restart") -> None:
        if self.state != "checking" or self.waiting.pop(cause, None) is None:
            return
        if self.waiting:
            log.info("%s; still not acknowledging: %s", why, self.reason)
            return
        self.state = "leading"
        self.gate.frozen = None
        self._install()
        log.info("acknowledging writes: %s", why)
        self.barriers.replicated()

    def fence(self, why: str) -> None:
        if self.state == "fenced":
            return
        checking = self.state == "checking"
        self.state, self._fenced_why = "fenced", why
        self.gate.frozen = self.barriers.durable
        self._install()
        self.barriers.abandon(self.refusal if checking else None)

    def problems(self) -> list[str]:
        if self.state == "checking":
            return [f"not acknowledging writes: {self.reason}"]
        if self.state == "fenced":
            return [f"fenced: {self.reason}"]
        return []
