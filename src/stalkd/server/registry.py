"""The connection registry: ids, the open connections, and the ``--max-connections`` limit.

Ensures: at most ``limit`` connections are registered, TLS handshakes in progress included
(``begin_handshake``/``end_handshake``), and at most ``per_address`` handshakes are in progress
from one address; a refused connection is logged in a summary at most once per ``every``
seconds (a flood of refusals writes a line a second, not a line each), naming how many were
refused since the last line and the last peer refused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Registry"]

log = logging.getLogger("stalkd.server")

C = TypeVar("C")


class Registry(Generic[C]):
    """Open connections by id.

    >>> r: Registry[str] = Registry(limit=1, clock=lambda: 0.0)
    >>> r.admit(r.next_id(), "a", "peer1"), r.admit(r.next_id(), "b", "peer2"), len(r)
    (True, False, 1)
    >>> r = Registry(limit=3, per_address=1, clock=lambda: 0.0)
    >>> r.begin_handshake("10.0.0.1"), r.begin_handshake("10.0.0.1"), r.handshakes
    (True, False, 1)
    """

    def __init__(self, limit: int, *, per_address: int = 64, every: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.per_address = per_address
        self.handshakes = 0  # TLS handshakes in progress (they count in ``limit``)
        self._by_address: dict[str, int] = {}
        self._conns: dict[int, C] = {}
        self._last_id = 0
        self._every = every
        self._clock = clock
        self._refused = 0  # refusals not yet logged
        self._logged_at = -every
        self.refused_total = 0

    def next_id(self) -> int:
        self._last_id += 1
        return self._last_id

    def admit(self, conn_id: int, conn: C, peer: str) -> bool:
        """Register ``conn``, or refuse it (False) when ``limit`` connections and handshakes
        are open (a TLS connection's own handshake has ended before it is admitted)."""
        if len(self._conns) + self.handshakes >= self.limit:
            self._refuse(peer, f"{self.limit} connections and TLS handshakes is the limit "
                               "(--max-connections)")
            return False
        self._conns[conn_id] = conn
        return True

    def begin_handshake(self, address: str) -> bool:
        """A TLS handshake from ``address`` may start (counted until ``end_handshake``), or
        not (False): ``limit`` connections and handshakes are open, or ``per_address``
        handshakes from it are in progress."""
        if len(self._conns) + self.handshakes >= self.limit:
            self._refuse(address, f"{self.limit} connections and TLS handshakes is the limit "
                                  "(--max-connections)")
            return False
        n = self._by_address.get(address, 0)
        if n >= self.per_address:
            self._refuse(address, f"{n} TLS handshakes in progress from one address is the "
                                  "limit (--max-handshakes-per-address)")
            return False
        self._by_address[address] = n + 1
        self.handshakes += 1
        return True

    def end_handshake(self, address: str) -> None:
        """The handshake ``begin_handshake`` let start ended (done, failed or timed out)."""
        self.handshakes -= 1
        n = self._by_address.get(address, 0) - 1
        if n > 0:
            self._by_address[address] = n
        else:
            self._by_address.pop(address, None)

    def _refuse(self, peer: str, why: str) -> None:
        self.refused_total += 1
        self._refused += 1
        now = self._clock()
        if now - self._logged_at >= self._every:
            log.warning("refused %d connection(s) (last from %s): %s", self._refused, peer, why)
            self._refused = 0
            self._logged_at = now

    def remove(self, conn_id: int) -> C | None:
        return self._conns.pop(conn_id, None)

    def get(self, conn_id: int) -> C | None:
        return self._conns.get(conn_id)

    def __contains__(self, conn_id: int) -> bool:
        return conn_id in self._conns

    def __len__(self) -> int:
        return len(self._conns)

    def __iter__(self) -> Iterator[C]:
        return iter(list(self._conns.values()))
