"""Whether the server closed an idle connection, asked of the socket without blocking.

With failover on, both transports ask this before sending a command: a server that died
while the connection was idle is then noticed before the command goes out, so it is sent to
the new primary instead of into a dead connection, where whether it took effect would look
unknown (and a ``put`` could not be resent).
"""

from __future__ import annotations

import select

__all__ = ["IdleCheck"]


class IdleCheck:
    """One ``poll`` of an idle connection's descriptor (the poll object is made once per
    connection, so a check costs one system call): readable means closed, or bytes nobody
    asked for; either way the connection cannot be used. Not for TLS connections (the
    caller skips them): TLS 1.3 session tickets may arrive while one is idle.

    >>> import socket
    >>> a, b = socket.socketpair()
    >>> gone = IdleCheck(a.fileno())
    >>> gone()
    False
    >>> b.close(); gone()
    True
    """

    __slots__ = ("_poll",)

    def __init__(self, fileno: int) -> None:
        self._poll = select.poll()
        self._poll.register(fileno, select.POLLIN | select.POLLPRI)

    def __call__(self) -> bool:
        return bool(self._poll.poll(0))
