"""The one-writer lock of a log directory: ``LOCK``, held with ``flock`` by the process that
writes and holding its pid while it does (``stalkd log inspect`` reports it). Readers
(``LogReader``) never take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from .errors import LogLockedError
from .fs import FileSystem

__all__ = ["LOCK_NAME", "lock_dir", "unlock_dir"]

LOCK_NAME = "LOCK"


def lock_dir(fs: FileSystem, path: str) -> int:
    """Take the lock of the log directory ``path`` (``LogLockedError``, naming the holder's
    pid, if another process holds it); the lock file's descriptor, held until
    :func:`unlock_dir`."""
    fd = fs.open(os.path.join(path, LOCK_NAME), os.O_RDWR, create=True)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise LogLockedError(
            f"{path}: log is already open for writing (lock held by pid {holder}); "
            "one writer per directory, readers use LogReader"
        ) from None
    os.ftruncate(fd, 0)
    fs.pwrite_all(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def unlock_dir(fd: int) -> None:
    """Release the lock taken by :func:`lock_dir`."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)  # no stale pid for `stalkd log inspect` to report
    os.close(fd)
