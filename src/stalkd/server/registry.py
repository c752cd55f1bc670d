"""The connection registry: ids, the open connections, and the ``--max-connections`` limit.

Ensures: at most ``limit`` connections are registered; a refused connection is logged in a
summary at most once per ``every`` seconds (a flood of refusals writes a line a second, not a
line each), naming how many were refused since the last line and the last peer refused.
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
    """

    def __init__(self, limit: int, *, every: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
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
        """Register ``conn``, or refuse it (False) when ``limit`` are open."""
        if len(self._conns) >= self.limit:
            self.refused_total += 1
            self._refused += 1
            now = self._clock()
            if now - self._logged_at >= self._every:
                log.warning("refused %d connection(s) (last from %s): %d connections is the "
                            "limit (--max-connections)", self._refused, peer, self.limit)
                self._refused = 0
                self._logged_at = now
            return False
        self._conns[conn_id] = conn
        return True

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
