"""The wake-up of one group-commit batch: its members wait on it, its leader opens it.

Ensures: ``wait`` returns True only after ``open`` (the batch is resolved), and every member
waiting then returns (each wakes the next: one wake-up per member, no herd); ``hand`` wakes
exactly one waiter, who gets False (it leads the batch) while the gate stays closed to the
others; a wait with a timeout returns None when it runs out, having taken nothing.

One implementation, compiled by Cython at install time where a compiler exists
(``stalkd.extensions.CYTHON_MODULES``); ``STALKD_NO_EXTENSIONS=1`` or a missing build runs this
file as it is.

Example:
    >>> g = Gate()
    >>> g.open()
    >>> g.wait(), g.wait(), g.done
    (True, True, True)
"""

from __future__ import annotations

import threading

__all__ = ["Gate", "new_gate"]


class Gate:
    """A lock held from creation; a woken member releases it for the next."""

    __slots__ = ("_lock", "done")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.done = False

    def wait(self, timeout: float | None = None) -> bool | None:
        """Block until opened (True: the next waiter is woken), handed the lead (False), or for
        at most ``timeout`` seconds (None: the time ran out)."""
        t = -1.0 if timeout is None or timeout > threading.TIMEOUT_MAX else max(0.0, timeout)
        if not self._lock.acquire(True, t):
            return None
        if self.done:
            self._lock.release()
            return True
        return False

    def open(self) -> None:
        """Resolved: wake the waiters (one by one, each waking the next)."""
        self.done = True
        self._lock.release()

    def hand(self) -> None:
        """Wake one waiter to lead; the gate stays closed to the others."""
        self._lock.release()


new_gate = Gate
"""What commit.py makes a batch's gate with."""
