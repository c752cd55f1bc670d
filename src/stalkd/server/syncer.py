"""The group-commit fsync thread: one persistent thread, woken per batch, reporting to the loop.

``Server`` hands a batch number to :meth:`Syncer.request`; the thread runs the storage's
``sync()`` and calls ``done(target, error)`` on the event loop thread. Compared with
``loop.run_in_executor`` per batch this makes no future, work item or queue entry per fsync
(each of those costs Python work and an extra loop iteration before the replies can go out):
one lock release wakes the thread, one ``call_soon_threadsafe`` wakes the loop.

Ensures:
- At most one sync runs at a time; ``request`` is only called when none is running (the server
  keeps that rule, ``request`` checks it).
- Every request gets exactly one ``done`` call on the loop thread, with the exception the sync
  raised (or None), unless the syncer was stopped first.
- ``stop()`` returns once the thread has exited; a sync in progress finishes first.
- With ``timing``, each ``done`` is preceded by ``timing(handoff, fsync)`` in seconds:
  request to sync start plus sync end to the loop running the report, and the sync itself,
  both read from ``clock`` (``time.perf_counter`` unless a test passes its own).

Example::

    syncer = Syncer(storage.sync, server_done_callback, loop)
    syncer.request(batch_number)   # later, on the loop: server_done_callback(batch_number, None)
    syncer.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from time import perf_counter

__all__ = ["Syncer"]


class Syncer:
    """A thread that runs ``sync()`` on request and reports ``done(target, exc)`` on ``loop``."""

    def __init__(
        self,
        sync: Callable[[], object],
        done: Callable[[int, BaseException | None], None],
        loop: asyncio.AbstractEventLoop,
        timing: Callable[[float, float], None] | None = None,
        clock: Callable[[], float] = perf_counter,
    ) -> None:
        self._sync = sync
        self._clock = clock
        self._done = done
        self._timing = timing
        self._loop = loop
        self._requested = self._started = self._ended = 0.0
        # A plain lock used as a binary semaphore: released = "a request is waiting". Cheaper to
        # wake than a Condition (no waiter list, no second lock).
        self._go = threading.Lock()
        self._go.acquire()
        self._target = 0
        # A sync was requested and its ``done`` has not run yet (read per batch by the
        # barriers: an attribute, not a property).
        self.busy = False
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="stalkd-sync", daemon=True)
        self._thread.start()

    def request(self, target: int) -> None:
        """Sync everything written so far; ``done(target, exc)`` follows on the loop thread."""
        if self.busy:
            raise RuntimeError("a sync is already running")
        if self._stopping:
            raise RuntimeError("the syncer is stopped")
        self.busy = True
        self._target = target
        self._requested = self._clock()
        self._go.release()

    def _run(self) -> None:
        while True:
            self._go.acquire()
            if self._stopping:
                return
            target = self._target
            exc: BaseException | None = None
            self._started = self._clock()
            try:
                self._sync()
            except BaseException as e:  # reported to the loop, which treats it as fatal
                exc = e
            self._ended = self._clock()
            try:
                self._loop.call_soon_threadsafe(self._report, target, exc)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return
            if self._stopping:
                return

    def _report(self, target: int, exc: BaseException | None) -> None:
        self.busy = False
        if self._timing is not None and exc is None:
            started, ended = self._started, self._ended
            self._timing(started - self._requested + self._clock() - ended, ended - started)
        self._done(target, exc)

    def stop(self) -> None:
        """End the thread (after the sync in progress, if any); idempotent."""
        if self._stopping:
            return
        self._stopping = True
        # Already released (a request the thread has not picked up yet)? It sees _stopping then.
        with contextlib.suppress(RuntimeError):
            self._go.release()
        self._thread.join()
