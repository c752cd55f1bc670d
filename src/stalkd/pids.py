"""Whether a process id names a running process, written once, below every layer (it imports
nothing of stalkd's), for the log's ``inspect`` (is the writer named in ``LOCK`` still there?)
and the worker's metrics (do a dead child's gauges still count?).

``kill(pid, 0)`` alone is not the answer: it succeeds on a zombie, a process that has exited
but that its parent has not reaped yet (a supervisor busy elsewhere, or PID 1 under load), so
an exited writer or child would count as running until then. Where ``/proc`` can say, its state
letter decides (``Z`` zombie, ``X`` dead: not running); where it cannot (no ``/proc``, or a
mount that hides other users' processes), ``kill(pid, 0)`` does, erring towards "running" when
the process is someone else's.

>>> import os
>>> pid_alive(os.getpid()), pid_alive(0)
(True, False)
"""

from __future__ import annotations

import os

__all__ = ["pid_alive"]

_DEAD_STATES = frozenset("ZXx")  # zombie, dead (older kernels also wrote 'x')


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a process that has not exited (a zombie has)."""
    if pid <= 0:  # kill(0 or -n, 0) would ask about a process group, not a process
        return False
    state = _proc_state(pid)
    if state is not None:
        return state not in _DEAD_STATES
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process holds the pid
    return True


def _proc_state(pid: int) -> str | None:
    """The state letter of ``/proc/PID/stat``, or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # "PID (COMM) STATE ...": COMM may itself hold ") ", so split at the last one.
    fields = stat.rpartition(b")")[2].split()
    return fields[0].decode("ascii", "replace") if fields else None
