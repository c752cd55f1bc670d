"""What the holder of an etcd lease may assume, on its own monotonic clock (pure: times are
arguments).

etcd starts a lease's TTL again when it receives a grant or keep-alive; the holder knows only
when it *sent* the request. So the lease lives at least until ``sent + ttl`` (on a clock that
runs at the holder's rate), and another node can take the leadership key only after that. The
holder acts as primary only while ``now < sent + ttl - margin``: the margin covers the time
between this check and the acknowledgement leaving the process, clock-rate differences, and a
pause (GC, SIGSTOP) shorter than itself; a longer pause is caught by the check itself, which the
holder makes right before releasing acknowledgements, after it wakes.

>>> h = LeaseHold(lease=7, sent=100.0, ttl=5.0, margin=1.5)
>>> h.alive(103.4), h.alive(103.5), h.until
(True, False, 103.5)
>>> h.renewed(sent=102.0, ttl=5.0).until
105.5
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["LeaseHold", "DEFAULT_TTL", "default_margin", "renew_every"]

DEFAULT_TTL = 5  # seconds: a dead primary is replaced within about this plus a poll


def default_margin(ttl: float) -> float:
    """The part of the TTL the holder does not use: a third, at least half a second."""
    return max(0.5, ttl / 3)


def renew_every(ttl: float) -> float:
    """How often the holder renews: five tries fit before the margin is reached."""
    return ttl / 5


@dataclass(frozen=True)
class LeaseHold:
    """A lease this node holds: etcd's ``lease`` id, when the last successful grant or
    keep-alive was ``sent`` (monotonic), the ``ttl`` etcd granted then, the ``margin`` kept back."""

    lease: int
    sent: float
    ttl: float
    margin: float

    @property
    def until(self) -> float:
        """The monotonic time after which this node must not acknowledge as primary."""
        return self.sent + self.ttl - self.margin

    def alive(self, now: float) -> bool:
        return now < self.until

    def renewed(self, sent: float, ttl: float) -> LeaseHold:
        return replace(self, sent=sent, ttl=ttl)
