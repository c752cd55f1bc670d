"""Which server is the primary, without a socket or a clock: a server's role read from its
``stats``, one round of probes and its choice, and the rounds of one search with their backoff
and deadline (times are the caller's). The search's steps (``_failover.find_primary``)
and both transports' drivers (``_dial``, ``_aiodial``) are built on these.

A server's ``stats`` says ``role: primary`` or ``role: standby`` and ``epoch: N``; a server
without those lines (beanstalkd, an older stalkd) is a primary of epoch 0. The client probes
every address once per round and connects to the primary with the highest epoch (the earliest
address on a tie), so a former primary that has not yet learnt of its successor loses to it.
A round that finds no primary is followed by another after a backoff that doubles up to
``BACKOFF_CAP``, until the search's timeout after the failure that started it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from stalkd.client._address import Address
from stalkd.client._yaml import Value
from stalkd.client.errors import NoPrimary

__all__ = ["Role", "role_of", "Round", "Search", "BACKOFF_FIRST", "BACKOFF_CAP"]

BACKOFF_FIRST = 0.05
BACKOFF_CAP = 1.0


class Role(NamedTuple):
    """What a server's ``stats`` says it is.

    >>> str(role_of({"role": "standby", "epoch": 3}))
    'standby (epoch 3)'
    """

    primary: bool
    epoch: int

    def __str__(self) -> str:
        return f"{'primary' if self.primary else 'standby'} (epoch {self.epoch})"


def role_of(stats: Mapping[str, Value]) -> Role:
    """The role in a ``stats`` reply; without ``role``/``epoch`` lines, a primary of epoch 0.

    >>> role_of({"version": "1.13"}), role_of({"role": "primary", "epoch": 2})
    (Role(primary=True, epoch=0), Role(primary=True, epoch=2))
    """
    role = stats.get("role", "primary")
    epoch = stats.get("epoch", 0)
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        epoch = 0
    return Role(role == "primary", epoch)


class Round:
    """One pass over the addresses: the transport probes each (in ``addresses`` order, or all
    at once) and reports what it saw; :meth:`choice` is then the primary to use, if any.

    >>> from stalkd.client._address import parse_addresses
    >>> r = Round(parse_addresses("a:1,b:2,c:3"))
    >>> r.failed(r.addresses[0], "connection refused")
    >>> r.answered(r.addresses[1], {"role": "standby", "epoch": 4})
    >>> r.answered(r.addresses[2], {"role": "primary", "epoch": 4})
    >>> str(r.choice())
    'c:3'
    """

    __slots__ = ("addresses", "seen")

    def __init__(self, addresses: Sequence[Address]) -> None:
        self.addresses = tuple(addresses)
        self.seen: dict[Address, Role | str] = {}

    def answered(self, address: Address, stats: Mapping[str, Value]) -> None:
        self.seen[address] = role_of(stats)

    def failed(self, address: Address, why: str) -> None:
        self.seen[address] = why

    def choice(self) -> Address | None:
        """The primary with the highest epoch (the earliest address on a tie), else ``None``."""
        best: tuple[int, Address] | None = None
        for address in self.addresses:
            role = self.seen.get(address)
            if isinstance(role, Role) and role.primary and (best is None or role.epoch > best[0]):
                best = (role.epoch, address)
        return None if best is None else best[1]

    def describe(self) -> str:
        """What each address answered, for an error message."""
        return "; ".join(f"{a}: {self.seen.get(a, 'not tried')}" for a in self.addresses)


class Search:
    """The rounds of one search for a primary, which gives up ``timeout`` seconds after
    ``started`` (times are the caller's monotonic clock).

    >>> from stalkd.client._address import parse_addresses
    >>> s = Search(parse_addresses("a:1,b:2"), timeout=1.0, started=0.0)
    >>> s.next_wait(0.0)            # the first round goes at once
    0.0
    >>> _ = s.round(); s.next_wait(0.0), s.next_wait(0.0)
    (0.05, 0.1)
    >>> s.next_wait(0.875)          # never past the deadline...
    0.125
    >>> s.next_wait(1.0) is None    # ...and nothing after it
    True
    """

    __slots__ = ("addresses", "timeout", "deadline", "rounds", "_backoff", "last")

    def __init__(self, addresses: Sequence[Address], *, timeout: float, started: float) -> None:
        self.addresses = tuple(addresses)
        self.timeout = timeout
        self.deadline = started + timeout
        self.rounds = 0
        self._backoff = BACKOFF_FIRST
        self.last: Round | None = None

    def next_wait(self, now: float) -> float | None:
        """Seconds to wait before the next round, or ``None``: the search is over."""
        if self.rounds == 0:
            return 0.0
        left = self.deadline - now
        if left <= 0:
            return None
        wait = min(self._backoff, left)
        self._backoff = min(self._backoff * 2, BACKOFF_CAP)
        return wait

    def round(self) -> Round:
        self.rounds += 1
        self.last = Round(self.addresses)
        return self.last

    def error(self) -> NoPrimary:
        seen = self.last.describe() if self.last is not None else "no address tried"
        return NoPrimary(f"no primary among {len(self.addresses)} server(s) after "
                         f"{self.rounds} round(s) in {self.timeout:g}s ({seen}); promote a "
                         f"standby (stalkd promote) or start the primary")
