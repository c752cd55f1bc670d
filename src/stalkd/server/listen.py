"""The listening socket, bound before anything heavy is imported.

Some client test fixtures connect 0.1 s after starting the server, so ``stalkd serve`` binds and
listens here first (only ``socket``/``os``/``stat`` needed), and only then imports asyncio,
the engine and the WAL and runs recovery. Connections made meanwhile wait in the kernel's
backlog; their commands are read once recovery is done.

Ensures: a TCP listener has SO_REUSEADDR (a restarted server gets its port back while old
connections sit in TIME_WAIT); ``unix:PATH`` replaces a stale socket file, but refuses to
remove anything that is not a socket, or a socket some live server still accepts on; a UNIX
socket file is created with the permissions asked for (never wider, not even for an instant),
and :func:`remove_unix` removes it at exit only if it is still the one we created.

Example:
    >>> s = bind_listener("127.0.0.1", 0); s.getsockname()[0]
    '127.0.0.1'
    >>> s.close()
"""

from __future__ import annotations

import os
import socket
import stat

__all__ = ["bind_listener", "ListenError", "from_systemd", "describe", "remove_unix",
           "Listener", "bind_all"]

BACKLOG = 1024


class ListenError(OSError):
    """The address cannot be listened on; the message names it and why."""


def _unix(path: str, mode: int) -> socket.socket:
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
    old = os.umask(0o777 & ~mode)  # bind creates the file: with these bits from the start
    try:
        s.bind(path)
        os.chmod(path, mode)  # the umask can only narrow; set exactly what was asked
        s.listen(BACKLOG)
    except OSError as e:
        s.close()
        raise ListenError(f"cannot listen on unix:{path}: {e.strerror or e}") from e
    finally:
        os.umask(old)
    s.setblocking(False)
    return s


def bind_listener(host: str, port: int, socket_mode: int = 0o660) -> socket.socket:
    """A non-blocking socket listening on ``host:port`` (or ``unix:PATH`` as host, its file
    created with ``socket_mode``)."""
    if host.startswith("unix:"):
        return _unix(host[5:], socket_mode)
    # An ASCII name goes as bytes: a str is first run through the "idna" codec, whose import
    # (re, stringprep, unicodedata) would come before the port listens.
    name = host.encode("ascii") if host.isascii() else host
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
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


def describe(sock: socket.socket) -> str:
    """The address ``sock`` is bound to, as a client would write it (the real port after
    binding port 0)."""
    if sock.family == socket.AF_UNIX:
        return f"unix:{sock.getsockname()}"
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if sock.family == socket.AF_INET6 else f"{host}:{port}"


def is_loopback(sock: socket.socket) -> bool:
    """Whether only this machine can reach ``sock`` (loopback or a UNIX socket)."""
    if sock.family == socket.AF_UNIX:
        return True
    from stalkd.server.config import is_loopback as host_is_loopback

    return host_is_loopback(sock.getsockname()[0])


def remove_unix(path: str, ino: int) -> None:
    """Remove the socket file we created at ``path`` (a later server's file is left alone)."""
    try:
        st = os.lstat(path)
        if st.st_ino == ino and stat.S_ISSOCK(st.st_mode):
            os.unlink(path)
    except OSError:
        pass


class Listener:
    """One bound socket and its kind: ``plain`` (the beanstalkd -l/-p one), ``unix`` or ``tls``."""

    __slots__ = ("kind", "sock", "address", "unix_ino")

    def __init__(self, kind: str, sock: socket.socket, *, owns_file: bool = True) -> None:
        self.kind = kind
        self.sock = sock
        self.address = describe(sock)
        # The inode of the UNIX socket file we created (0: none, or systemd's to keep).
        unix = sock.family == socket.AF_UNIX and owns_file
        self.unix_ino = os.lstat(self.address[5:]).st_ino if unix else 0

    def remove_file(self) -> None:
        """At exit: a UNIX socket file we created goes with it."""
        if self.unix_ino:
            remove_unix(self.address[5:], self.unix_ino)


def bind_all(plain: socket.socket | None, listen: str, port: int, *, unix: tuple[str, ...] = (),
             tls: tuple[tuple[str, int], ...] = (), socket_mode: int = 0o660) -> list[Listener]:
    """Every listener of a configuration, bound; on an error those bound so far are closed.
    ``plain`` is a socket systemd passed (then ``listen``/``port`` are not bound); an empty
    ``listen`` means no plain listener."""
    out: list[Listener] = []
    try:
        if plain is not None:  # systemd's: it owns a socket file, if any
            kind = "unix" if plain.family == socket.AF_UNIX else "plain"
            out.append(Listener(kind, plain, owns_file=False))
        elif listen:
            kind = "unix" if listen.startswith("unix:") else "plain"
            out.append(Listener(kind, bind_listener(listen, port, socket_mode)))
        for path in unix:
            out.append(Listener("unix", _unix(path, socket_mode)))
        for host, tls_port in tls:
            out.append(Listener("tls", bind_listener(host, tls_port)))
    except BaseException:
        for done in out:
            done.sock.close()
            done.remove_file()
        raise
    return out
