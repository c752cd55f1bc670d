"""What a server says about its replication: the ``stats`` lines, ``/readyz`` reasons, the
figures ``/metrics`` and ``GET /api/v1/replication`` show. Read-only; written once here.

Ensures: a primary that stepped down says ``role: fenced`` and the epoch that fenced it; a
primary whose replies wait for standbys, or that does not acknowledge yet, says why; a standby
that is not in sync says why, and its lag (records and seconds) is what it knows of the
primary's log, not what it last managed to receive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stalkd.replication.authority import Authority
    from stalkd.replication.receiver import Receiver
    from stalkd.replication.role import Role
    from stalkd.replication.sender import Replicas

__all__ = ["Status"]


class Status:
    def __init__(self, role: Role, replicas: Replicas | None = None, receiver: Receiver | None = None,
                 authority: Authority | None = None) -> None:  # fmt: skip
        self.role = role
        self.replicas = replicas
        self.receiver = receiver
        self.authority = authority

    def stats(self) -> dict[str, Any]:
        """The ``stats`` lines (``protocol.stats`` orders them)."""
        role = self.role
        out: dict[str, Any] = {"role": role.name, "epoch": role.state.epoch}
        if role.name == "fenced":
            out["fenced-by-epoch"] = role.fenced
        reps = self.replicas
        if reps is not None and (reps.senders or reps.gate is not None):
            lags = reps.lags()
            out["standbys"] = len(lags)
            out["standby-lag"] = max((n for _, n, _ in lags), default=0)
            out["standby-lag-seconds"] = round(max((t for _, _, t in lags), default=0.0), 3)
        rec = self.receiver
        if rec is not None and role.standby:
            out["primary-lag"] = rec.lag
            out["primary-lag-seconds"] = round(rec.lag_seconds, 3)
            out["in-sync"] = rec.problem is None
        return out

    def problems(self) -> list[str]:
        """Why this server is not ready as what it is (``/readyz``; empty: ready)."""
        why = []
        role = self.role
        if role.name == "fenced":
            why.append(f"fenced: epoch {role.fenced} is newer than this server's {role.state.epoch}; "
                       "it refuses writes (NOT_PRIMARY)")
        elif self.authority is not None:
            why.extend(self.authority.problems())
        if self.replicas is not None and not role.standby:
            waiting = self.replicas.waiting()
            if waiting is not None:
                why.append(waiting)
        rec = self.receiver
        if rec is not None and role.standby and rec.problem is not None:
            why.append(f"standby not in sync ({rec.lag} records, {rec.lag_seconds:.1f} s behind): {rec.problem}")
        return why
