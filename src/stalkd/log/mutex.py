"""The locks of the write path (the segment writer's, the group commit's), taken by C calls.

A ``threading.Lock`` is a Python method call per ``acquire`` and per ``release`` even from a
compiled caller (callgrind: ~430 instructions a call, most of them argument parsing and the
timed-acquire wrapper), and a durable put under ``always`` took twelve of them (the write, the
sync's pin and unpin, the group commit's state). Compiled, :func:`new_mutex` gives a
:class:`Mutex`, whose ``acquire`` and ``release`` are C functions for callers that cimport the
type (mutex.pxd): a free lock is taken by one atomic compare-and-swap and given back by one
atomic store (the C API's own lock reads the clock on every acquire, even one that does not
wait: ~200 instructions); a taker that must wait sleeps on a condition variable with the GIL
released. It still answers ``acquire``/``release``/``locked``/``with`` from Python
(``threading.Condition`` takes it as its lock). Uncompiled, :func:`new_mutex` gives a plain ``threading.Lock``: the same calls,
the same behaviour.

Ensures (both builds): ``acquire()`` blocks (without holding the GIL) until the lock is taken,
``acquire(False)`` never blocks, ``acquire(True, t)`` waits at most ``t`` seconds; True iff
taken. ``release()`` of a lock not taken raises ``RuntimeError``. Any thread may release a lock
another took (the group commit's wake-up does). A blocked ``acquire`` is not interrupted by
signals (the write path holds these locks for a few instructions only).

Example:
    >>> m = new_mutex()
    >>> m.acquire(), m.acquire(False), m.locked()
    (True, False, True)
    >>> m.release()
    >>> with m:
    ...     m.locked()
    True
    >>> m.locked()
    False
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Mutex", "new_mutex"]


@cython.final
@cython.cclass
class Mutex:
    """A lock of the C API (compiled only: uncompiled, :func:`new_mutex` gives a
    ``threading.Lock``). See the module's docstring."""

    _lock: Any  # (a C pointer: mutex.pxd)
    _held: bool

    def __init__(self) -> None:
        if self._lock == cython.NULL:
            self._lock = _mx_new()
            if self._lock == cython.NULL:
                raise MemoryError("cannot allocate a lock")
        self._held = False

    def __dealloc__(self) -> None:
        if self._lock != cython.NULL:
            _mx_free(self._lock)

    def acquire(self, blocking: bool = True, timeout: float = -1.0) -> bool:
        """Take the lock (see the module's docstring); True iff taken."""
        if _mx_take(self._lock, (-1.0 if timeout < 0 else timeout) if blocking else 0.0):
            self._held = True
            return True
        return False

    def release(self) -> None:
        """Give the lock back; RuntimeError if it is not taken."""
        if not self._held:
            raise RuntimeError("release unlocked lock")
        self._held = False
        _mx_give(self._lock)

    def locked(self) -> bool:
        """Whether the lock is taken."""
        return self._held

    def __enter__(self) -> bool:
        return self.acquire(True, -1.0)

    def __exit__(self, *exc: object) -> None:
        self.release()


def new_mutex() -> Mutex:
    """A new lock: compiled, a :class:`Mutex`; uncompiled, a ``threading.Lock`` (same calls)."""
    if cython.compiled:
        return Mutex()
    return cast(Mutex, threading.Lock())


if not cython.compiled:  # compiled, mutex.pxd takes these from C (the C API's locks)

    def _mx_new() -> object:
        raise NotImplementedError("compiled only")

    def _mx_free(lock: object) -> None:
        raise NotImplementedError("compiled only")

    def _mx_take(lock: object, timeout: float) -> bool:
        raise NotImplementedError("compiled only")

    def _mx_give(lock: object) -> None:
        raise NotImplementedError("compiled only")
