"""Ticket: the non-blocking form of a durable append (a tiny future, also awaitable).

Ensures: a ticket resolves exactly once, either done (its frames are durable under the log's
policy) or failed (the log hit a fatal fsync error); callbacks run once, after resolution.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython

    from .visibility import Visibility
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Ticket"]


@cython.cclass
class Ticket:
    """Offsets ``first..last`` were written; the ticket is done when they are durable.

    Compiled, an extension type (ticket.pxd): a standby whose fsyncs run on the committer thread
    makes one per read, which the committer resolves, as C calls and fields (as a Python class
    its ``__init__`` alone took ~2,000 instructions).

    >>> import tempfile
    >>> from stalkd.log import Log
    >>> with Log.open(tempfile.mkdtemp(), durability="always") as log:
    ...     t = log.submit([b"a", b"b"])
    ...     t.wait(timeout=60)  # or: await t
    ...     t.first, t.last, t.done()
    (0, 1, True)
    """

    if not cython.compiled:  # (compiled, its fields are C fields: ticket.pxd)
        __slots__ = ("first", "last", "_vis", "_done", "_error", "_callbacks")

    def __init__(self, first: int, last: int, vis: Visibility, done: bool = False) -> None:
        self.first = first
        self.last = last
        # The log's waiters: its condition, which the committer notifies only while a thread
        # waits (``waiters``; a ticket's callbacks need no wake-up).
        self._vis = vis
        self._done = done
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Ticket], object]] = []

    def __repr__(self) -> str:
        state = "failed" if self._error else ("done" if self._done else "pending")
        return f"Ticket({self.first}..{self.last}, {state})"

    def done(self) -> bool:
        """True once resolved (durable, or failed: check :meth:`exception`)."""
        return self._done

    def exception(self) -> BaseException | None:
        """The fatal log error that failed this ticket, if any."""
        return self._error

    def wait(self, timeout: float | None = None) -> None:
        """Block until durable; raises the log's error if it failed, TimeoutError on timeout."""
        if not self._done:
            vis = self._vis
            with vis.cond:
                vis.waiters += 1
                try:
                    if not vis.cond.wait_for(lambda: self._done, timeout):
                        raise TimeoutError(f"offsets {self.first}..{self.last} not durable after {timeout} s")
                finally:
                    vis.waiters -= 1
        if self._error is not None:
            raise self._error

    def add_done_callback(self, fn: Callable[[Ticket], object]) -> None:
        """Call ``fn(ticket)`` once resolved (now, if it already is); it may run on the committer thread."""
        with self._vis.lock:
            if not self._done:
                self._callbacks.append(fn)
                return
        fn(self)

    def _resolve(self, error: BaseException | None) -> list[Callable[[Ticket], object]]:
        """Mark resolved (caller holds the condition); returns callbacks to run outside the lock."""
        if self._done:
            return []
        self._done = True
        self._error = error
        callbacks, self._callbacks = self._callbacks, []
        return callbacks

    def __await__(self) -> Generator[Any, None, None]:
        if not self._done:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()

            def _wake(_t: Ticket) -> None:
                loop.call_soon_threadsafe(lambda: None if fut.done() else fut.set_result(None))

            self.add_done_callback(_wake)
            yield from fut.__await__()
        if self._error is not None:
            raise self._error
