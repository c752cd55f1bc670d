"""Who waits to see appended records: threads blocked in ``wait`` and asyncio futures.

Ensures: a waiter returns once what it may see reaches past its offset (it is woken whenever that
grows: ``notify_locked``), once the log stops, or when its timeout runs out; a future is done at
once if what it waits for is already visible, else once it becomes visible.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from .mutex import Mutex

__all__ = ["Visibility"]


@cython.cclass
class Visibility:
    """The waiters of one log, under its group commit's condition ``cond`` (whose holder calls
    ``notify_locked`` when what they may see grows).

    Compiled, an extension type (visibility.pxd): the group commit and the write path read
    ``waiters`` and ``async_waiters`` per batch written and per sync as C fields (they were two
    attribute look-ups each, ~320 instructions)."""

    cond: threading.Condition
    lock: Mutex | threading.Condition
    _stopped: Callable[[], bool]
    waiters: int
    async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]

    def __init__(self, cond: threading.Condition, stopped: Callable[[], bool],
                 lock: Mutex | None = None) -> None:  # fmt: skip
        self.cond = cond
        # ``cond``'s lock, taken directly where no wait follows (a ``with`` on the condition is
        # two Python-level calls more); None: take ``cond``.
        self.lock = cond if lock is None else lock
        self._stopped = stopped  # the log closed or failed: waiters give up
        self.waiters = 0  # threads blocked in wait or in a ticket's wait (Ticket)
        self.async_waiters = []

    def notify(self) -> None:
        """Something was written: wake threads and futures waiting to see it."""
        with self.cond:
            self.notify_locked()

    def notify_locked(self) -> None:
        self.cond.notify_all()
        if self.async_waiters:
            self.wake_async_locked()

    def wake_async_locked(self) -> None:
        waiters, self.async_waiters = self.async_waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_set_future, fut)

    def wait(self, offset: int, timeout: float, visible_end: Callable[[], int]) -> bool:
        """Block until ``visible_end() > offset``, the log stops, or timeout; True if visible."""
        deadline = time.monotonic() + timeout
        with self.cond:
            self.waiters += 1
            try:
                while visible_end() <= offset and not self._stopped():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.cond.wait(left)
            finally:
                self.waiters -= 1
        return visible_end() > offset

    def future(self, offset: int, visible_end: Callable[[], int]) -> asyncio.Future[None]:
        """A future of the running loop, done once ``visible_end() > offset`` (maybe at once)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self.cond:
            if visible_end() <= offset:
                self.async_waiters.append((loop, fut))
            else:
                fut.set_result(None)
        return fut


def _set_future(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
