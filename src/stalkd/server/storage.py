"""What the server needs from durable storage, and the in-memory storage that keeps nothing.

``stalkd.persist.wal.Wal`` is the durable implementation. ``MemoryStorage`` stands in when the
server runs without a data directory, so the server never branches on "is there a disk": it
writes and syncs every batch the same way, and the memory storage does nothing with them.

Ensures: ``MemoryStorage`` never refuses room, never fails, and holds no record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from stalkd.engine.model import Record

if TYPE_CHECKING:
    from stalkd.engine import Engine

__all__ = ["Storage", "MemoryStorage", "FatalStorageError", "no_space"]


class Storage(Protocol):
    """The WAL as the server uses it (``stalkd.persist.wal.Wal``, or ``MemoryStorage``).

    ``persistent`` is False for a storage that keeps nothing: replies then need no barrier and
    room is never short."""

    @property
    def persistent(self) -> bool: ...
    def admit(self, cost: int) -> bool: ...
    def admit_upto(self, n: int, unit: int) -> int: ...
    def settle(self, admitted: int, records: Sequence[Record]) -> None: ...
    def write(self, records: Sequence[Record]) -> None: ...
    def sync(self) -> None: ...
    def maintain(self, engine: Engine, now: float) -> bool: ...
    def on_segment(self, hook: Callable[[], object] | None) -> None: ...
    def final_snapshot(self, engine: Engine) -> str | None: ...
    def stats(self) -> dict[str, int]: ...
    def close(self) -> None: ...


class MemoryStorage:
    """A storage that keeps nothing: jobs live in the engine's memory only.

    >>> m = MemoryStorage(); m.admit(1 << 40), m.persistent, m.stats()
    (True, False, {})
    """

    persistent = False

    def admit(self, cost: int) -> bool:
        return True

    def admit_upto(self, n: int, unit: int) -> int:
        return max(n, 0)

    def settle(self, admitted: int, records: Sequence[Record]) -> None:
        pass

    def write(self, records: Sequence[Record]) -> None:
        pass

    def sync(self) -> None:
        pass

    def maintain(self, engine: Engine, now: float) -> bool:
        return False

    def on_segment(self, hook: Callable[[], object] | None) -> None:
        pass

    def final_snapshot(self, engine: Engine) -> str | None:
        return None

    def stats(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass


class FatalStorageError(RuntimeError):
    """The WAL failed to write or sync: acknowledged state can no longer be promised."""


def no_space(e: BaseException | None) -> bool:
    """``stalkd.engine.space.no_space``, where a log refusing a new segment counts as well.

    >>> import errno
    >>> from stalkd.log import LogFullError
    >>> no_space(OSError(errno.ENOSPC, "full")), no_space(LogFullError("full")), no_space(ValueError())
    (True, True, False)
    """
    # Imported here: a server in memory never loads the log stack (start-up time).
    from stalkd.engine.space import no_space as _no_space
    from stalkd.log import LogFullError

    return _no_space(e, also=(LogFullError,))
