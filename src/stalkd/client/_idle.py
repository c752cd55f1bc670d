"""Whether the server closed an idle connection, asked of the socket without blocking.

With failover on, both transports ask this before sending a command: a server that died
while the connection was idle is then noticed before the command goes out, so it is sent to
the new primary instead of into a dead connection, where whether it took effect would look
unknown (and a ``put`` could not be resent).
"""

from __future__ import annotations

import select

__all__ = ["peer_gone"]


def peer_gone(fileno: int) -> bool:
    """One ``poll`` of an idle connection's descriptor: readable means closed (or bytes
    nobody asked for; either way the connection cannot be used). Not for TLS connections
    (the caller skips them): TLS 1.3 session tickets may arrive while one is idle.

    >>> import socket
    >>> a, b = socket.socketpair()
    >>> peer_gone(a.fileno())
    False
    >>> b.close(); peer_gone(a.fileno())
    True
    """
    p = select.poll()
    p.register(fileno, select.POLLIN | select.POLLPRI)
    return bool(p.poll(0))
