"""Where a depth-1 round trip goes: inside the server, or outside it (``server_bench.py --split``).

At depth 1 a client sends a request only after the reply to its last one, so a cell's rate is
one over the round trip, and most of a round trip is not the server's: the client's own work,
the kernel's loopback and the two wake-ups. A server can be as quick as another per request and
still come out slower in a run whose client side was slower (a shared 2-core machine swings the
wake-ups by tens of microseconds between runs). This splits each round trip at the server's
system calls, per connection:

- **in the server**: from the ``read`` that brought a request (its exit, with data) to the
  ``write``/``writev`` of the reply on the same connection (its entry): parsing, the command,
  a WAL write (and in ``always`` the fdatasync), and with several connections the others' work
  in the same loop turn; what the server itself decides;
- **outside it**: from that reply's ``write`` (its exit) to the next ``read`` with data on the
  same connection: the client's side and both wake-ups.

The figures come from ``perf record`` on the server's system-call tracepoints over one more run
of the cell (``record``); ``split`` reads them from ``perf script`` lines
(``pid/tid time: syscalls:sys_enter_read: fd: 0x..``, and ``sys_exit_read: 0x..`` for the byte
count). A read that returns no data (EAGAIN, the end) is no request.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from meters import perf_script

__all__ = ["Split", "record", "split"]

_CALLS = ("read", "write", "writev")
_LINE = re.compile(r"\s*(?:\d+/)?(\d+)\s+([\d.]+):\s+syscalls:sys_(enter|exit)_(\w+):\s*(.*)")
_FD = re.compile(r"fd: 0x([0-9a-f]+)")


@dataclass(frozen=True)
class Split:
    """Medians and means of a run's round trips, split at the server, in microseconds."""

    requests: int
    inside_median: float
    inside_mean: float
    outside_median: float
    outside_mean: float

    def text(self) -> str:
        return (f"in the server {self.inside_median:.1f} us median ({self.inside_mean:.1f} mean), "
                f"outside it {self.outside_median:.1f} us ({self.outside_mean:.1f}); {self.requests} requests")  # fmt: skip


def split(text: str) -> Split | None:
    """The split of ``perf script`` lines of one server (see the module's text); None without a
    request answered."""
    pending_fd: dict[int, int] = {}  # thread -> the fd of its read or write in flight
    read_at: dict[int, float] = {}  # fd -> when a request's read returned (no reply yet)
    replied_at: dict[int, float] = {}  # fd -> when its last reply's write returned
    inside: list[float] = []
    outside: list[float] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None or m[4] not in _CALLS:
            continue
        tid, t, side, call, rest = int(m[1]), float(m[2]), m[3], m[4], m[5]
        if side == "enter":
            fm = _FD.search(rest)
            if fm is None:
                continue
            fd = int(fm[1], 16)
            pending_fd[tid] = fd
            if call != "read" and fd in read_at:
                inside.append(t - read_at.pop(fd))
            continue
        fd = pending_fd.pop(tid, -1)
        if fd < 0:
            continue
        result = int(rest.split()[0], 16) if rest.split() else 0
        if result >= 1 << 63:  # an error (EAGAIN): a negative return as perf prints it
            continue
        if call == "read":
            if result == 0:
                continue
            read_at.setdefault(fd, t)  # (a request read in two parts: its first read)
            if fd in replied_at:
                outside.append(t - replied_at.pop(fd))
        else:
            replied_at[fd] = t
    if not inside or not outside:
        return None
    us = 1e6
    return Split(len(inside), statistics.median(inside) * us, statistics.mean(inside) * us,
                 statistics.median(outside) * us, statistics.mean(outside) * us)  # fmt: skip


def record(pid: int, run: Callable[[], object]) -> Split | None:
    """``split`` of server ``pid`` over one call of ``run`` (a run of the cell), under ``perf
    record`` on its read/write/writev tracepoints."""
    _, text = perf_script((pid,), _CALLS, run)
    return split(text)
