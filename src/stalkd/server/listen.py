"""The listening socket, bound before anything heavy is imported.

Some client test fixtures connect 0.1 s after starting the server, so ``stalkd serve`` binds and
listens here first (only ``socket``/``os``/``stat`` needed), and only then imports asyncio,
the engine and the WAL and runs recovery. Connections made meanwhile wait in the kernel's
backlog; their commands are read once recovery is done.

Ensures: a TCP listener has SO_REUSEADDR (a restarted server gets its port back while old
connections sit in TIME_WAIT); ``unix:PATH`` replaces a stale socket file, but refuses to
remove anything that is not a socket, or a socket some live server still accepts on.

Example:
    >>> s = bind_listener("127.0.0.1", 0); s.getsockname()[0]
    '127.0.0.1'
    >>> s.close()
"""

from __future__ import annotations

import os
import socket
import stat

__all__ = ["bind_listener", "ListenError", "from_systemd"]

BACKLOG = 1024


class ListenError(OSError):
    """The address cannot be listened on; the message names it and why."""


def _unix(path: str) -> socket.socket:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise ListenError(f"{path} exists and is not a socket; not removing it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # stale: nobody accepts on it any more
        else:
            raise ListenError(f"{path}: another server is listening on this socket")
        finally:
            probe.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
        s.listen(BACKLOG)
    except OSError as e:
        s.close()
        raise ListenError(f"cannot listen on unix:{path}: {e.strerror or e}") from e
    s.setblocking(False)
    return s


def bind_listener(host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``host:port`` (or ``unix:PATH`` as host)."""
    if host.startswith("unix:"):
        return _unix(host[5:])
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ListenError(f"cannot resolve listen address {host!r}: {e}") from e
    last: OSError | None = None
    for family, kind, proto, _, addr in infos:
        s = socket.socket(family, kind, proto)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
            s.listen(BACKLOG)
        except OSError as e:
            s.close()
            last = e
            continue
        s.setblocking(False)
        return s
    reason = last.strerror if last is not None and last.strerror else str(last)
    raise ListenError(f"cannot listen on {host}:{port}: {reason}")


def from_systemd() -> socket.socket | None:
    """The first socket passed by systemd socket activation (``LISTEN_FDS``), if any."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return None
    if count < 1:
        return None
    s = socket.socket(fileno=3)
    s.setblocking(False)
    return s
