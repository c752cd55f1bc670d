"""Giving freed memory back to the operating system (glibc's allocator), after a flood.

A flood of connections (replies nobody reads, bodies in flight) leaves the C heap full of
free chunks: Python frees them, glibc keeps them, and the process's RSS stays at its peak
after the clients left. Two settings of glibc's ``malloc`` fix that, through ``ctypes``:

- ``tune()`` (once, at the server's first trim tick, a second after it serves) fixes the threshold above which an allocation gets pages of its
  own (``M_MMAP_THRESHOLD``, 1 MiB): glibc otherwise raises it up to 32 MiB after freeing a
  large block, and job bodies, joined reads and large replies then come from the heap;
- ``Trimmer.tick()`` (about every second) has a thread of its own ask glibc how much of its
  heap is free (``mallinfo2``) and, once ``threshold`` more than after the last trim (or than
  the least seen since) is free, return the free pages (``malloc_trim(0)``). Counted from the
  last trim, because pages given back stay counted as free: an absolute threshold trims every
  second for nothing after a large flood, and never after a flood that freed a little less
  than it (a 28 MiB server that kept 29 MiB after 200 readers left: twice its start). Not on the event loop: returning 100 MiB held the loop 20-30 ms of CPU
  (145 ms on a loaded machine) right after a flood, and ``ctypes`` lets go of the GIL for the
  call. The loop may still wait on glibc's arena lock if it allocates a large block meanwhile.

Elsewhere than glibc (musl, macOS) both do nothing.

``ctypes`` and the C library are loaded on the first call (``libc()``), not at import: loading
them takes ~1.5 ms, which a server pays only once it serves, not before its first reply
(``serve.preload`` loads them before ``-u`` switches user).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ctypes

__all__ = ["libc", "tune", "Trimmer", "MMAP_THRESHOLD", "TRIM_AT"]

log = logging.getLogger("stalkd.server")

MMAP_THRESHOLD = 2**20
TRIM_AT = 8 * 2**20  # newly free heap bytes that make a trim worth its walk over the heap
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


@functools.cache
def libc() -> ctypes.CDLL | None:
    """glibc, with the three functions typed (None elsewhere, or older than 2.33); loaded on
    the first call."""
    import ctypes

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]  # fmt: skip

    # glibc's soname, named rather than looked up: ``ctypes.util.find_library`` imports
    # ``shutil`` and ``tempfile`` and runs ``ldconfig -p`` in a child process, at every start.
    try:
        lib: Any = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    if not all(hasattr(lib, f) for f in ("malloc_trim", "mallopt", "mallinfo2")):
        return None  # not glibc (or older than 2.33)
    lib.mallinfo2.restype = Mallinfo2
    lib.malloc_trim.argtypes = [ctypes.c_size_t]
    lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return lib  # type: ignore[no-any-return]


def tune() -> bool:
    """Fix glibc's mmap threshold (see above); False where there is no glibc."""
    lib = libc()
    return lib is not None and bool(lib.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def free_heap() -> int:
    """Bytes glibc holds free in its heaps (0 without glibc)."""
    lib = libc()
    return 0 if lib is None else int(lib.mallinfo2().fordblks)


class Trimmer:
    """Returns free heap pages to the system once ``threshold`` more bytes of the heap are free
    than after the last trim (or than the least seen since)."""

    def __init__(self, threshold: int = TRIM_AT, free: Callable[[], int] | None = None) -> None:
        """``free``: the allocator's free heap bytes now (``free_heap``; a test's figures)."""
        self.threshold = threshold
        self.trims = 0
        self._free = free_heap if free is None else free
        self._floor = 0  # free heap after the last trim, or the least seen since
        self._thread: threading.Thread | None = None

    def tick(self) -> bool:
        """Start a look (and a trim if worth it) on a thread, unless the last one still runs;
        whether one started."""
        if libc() is None or (self._thread is not None and self._thread.is_alive()):
            return False
        self._thread = threading.Thread(target=self.trim, name="stalkd-memtrim", daemon=True)
        self._thread.start()
        return True

    def join(self) -> None:
        """Wait for the look in progress, if any."""
        if self._thread is not None:
            self._thread.join()

    def trim(self) -> bool:
        """Trim now if worth it (on the calling thread); whether it did."""
        lib = libc()
        if lib is None:
            return False
        t0 = time.perf_counter()
        free = self._free()
        self._floor = min(self._floor, free)
        if free - self._floor < self.threshold:
            return False
        lib.malloc_trim(0)
        self._floor = self._free()
        self.trims += 1
        log.debug("gave back the allocator's free memory (%.0f MiB free) in %.1f ms",
                  free / 2**20, (time.perf_counter() - t0) * 1e3)
        return True
