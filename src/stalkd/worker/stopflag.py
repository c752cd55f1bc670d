"""A stop request that a signal handler may set.

Python runs a signal handler in the main thread, between two of its bytecodes, so possibly
while that thread is inside ``wait`` on the very flag the handler sets. ``threading.Event``
holds a plain lock there: its ``set()`` in the handler then waits for that lock for ever (a
worker process that never stops). ``StopFlag`` is the same interface over a reentrant lock.

    >>> flag = StopFlag()
    >>> flag.wait(0), flag.is_set()
    (False, False)
    >>> flag.set(); flag.wait(), flag.is_set()
    (True, True)
"""

from __future__ import annotations

import threading

__all__ = ["StopFlag"]


class StopFlag:
    """``is_set``, ``set`` and ``wait`` as in ``threading.Event``; never cleared."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._cond:
            self._set = True
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """True once set; False if ``timeout`` seconds pass first. A handler that sets the flag
        between this thread's check and its wait is seen when the wait ends: a thread that a
        signal stops waits with a timeout."""
        with self._cond:
            if not self._set:
                self._cond.wait(timeout)
            return self._set
