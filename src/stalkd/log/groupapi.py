"""What a consumer group needs from its log (:class:`GroupLog`, which :class:`stalkd.log.Log`
provides) and what it hands out (:class:`Message`): the small interface between ``log.py`` and
the group modules, so neither imports the other's internals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

from .cursor import CursorSyncer
from .fs import FileSystem
from .reader import ReadPos

__all__ = ["GroupLog", "Message"]


class GroupLog(Protocol):
    """What a consumer group needs from its log (:class:`stalkd.log.Log` provides it)."""

    path: str
    fs: FileSystem

    @property
    def durability(self) -> str: ...

    @property
    def next_offset(self) -> int: ...

    def visible_end(self) -> int: ...

    def segment_bounds(self) -> list[tuple[int, int | None, str]]: ...

    def position_of_end(self) -> tuple[int, int]: ...

    def read(self, start: int, end: int | None = None, *, resume: ReadPos | None = None,
             make: Callable[[int, int, memoryview], Any] = ...) -> Iterator[Any]: ...  # fmt: skip

    def wait_visible(self, offset: int, timeout: float) -> bool: ...

    def future_visible(self, offset: int) -> asyncio.Future[None]: ...

    def cursor_syncer(self) -> CursorSyncer: ...

    def append(self, payload: bytes | bytearray | memoryview) -> int: ...


class Message(NamedTuple):
    """A record delivered to a group: ``payload`` is zero-copy; ``attempts`` counts deliveries.

    >>> Message(7, 0, memoryview(b"job")).bytes()
    b'job'
    """

    offset: int
    timestamp_us: int
    payload: memoryview
    attempts: int = 1

    def bytes(self) -> bytes:
        """A copy of the payload."""
        return bytes(self.payload)

