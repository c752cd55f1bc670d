"""Running the bound listeners: one asyncio server each, the same protocol code behind all.

A plain or UNIX listener runs every command as beanstalkd would. A TLS listener accepts plain
TCP and runs each handshake itself (handshake.py: counted in ``--max-connections``, capped per
address, bounded by ``--handshake-timeout``), then hands the same ``Connection`` the standard
library's TLS transport (uvloop's); with an ACL each of its connections gets a ``ConnPolicy``
keyed by the client certificate's subject.

Ensures:
- every listener's real address is logged once bound (``-p 0`` shows the port it got);
- a plain listener reachable from a network logs a WARNING naming the risk and the TLS flags,
  unless ``--plain-network-ok``;
- ``reload()`` (SIGHUP) builds new TLS contexts and ACL first and swaps them only if all of
  them load: handshakes that start afterwards use the new certificate, key and client CAs
  (connections already open carry on), and every TLS connection checks the new ACL;
- a reload closes each open TLS connection the new client CAs or ACL no longer admit
  (``recheck``), with a log line saying why;
- ``close()`` stops accepting and removes the UNIX socket files we created.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from stalkd.server.config import Config
from stalkd.server.connection import CommandPolicy, Connection
from stalkd.server.listen import Listener, is_loopback

if TYPE_CHECKING:  # TLS and ACL modules are imported only when their flags are given
    from stalkd.server.acl import Acl
    from stalkd.server.handshake import Gate, Handshake
    from stalkd.server.handshakelog import HandshakeLog
    from stalkd.server.recheck import CaIndex
    from stalkd.server.tls import TlsFiles

__all__ = ["Endpoints", "open_warning"]

log = logging.getLogger("stalkd.server")
BACKLOG = 1024


def open_warning(address: str) -> str:
    return (f"plain listener {address} is reachable from the network without encryption or "
            f"authentication: anyone who can connect can read, delete and kick every job and "
            f"fill the disk. Serve network clients with --tls-listen ADDR:PORT --tls-cert FILE "
            f"--tls-key FILE (--tls-client-ca FILE, --acl FILE) and keep -l on 127.0.0.1, or "
            f"pass --plain-network-ok if a firewall or private network already protects it")


class Endpoints:
    """The listeners of one server, started on its loop."""

    def __init__(self, cfg: Config, listeners: list[Listener], *,
                 tls: ssl.SSLContext | None = None, acl: Acl | None = None) -> None:
        self.cfg = cfg
        self.listeners = listeners
        self.tls_files: TlsFiles | None = None
        if cfg.tls_cert is not None:
            from stalkd.server.tls import TlsFiles

            self.tls_files = TlsFiles(cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca)
        self.tls = tls
        self.acl = acl
        self.servers: dict[int, asyncio.AbstractServer] = {}  # listener index -> its server
        # open TLS connections -> the CA certificates that issued theirs (a reload checks again)
        self._open: weakref.WeakKeyDictionary[Connection, frozenset[bytes]] = weakref.WeakKeyDictionary()
        self._cas: CaIndex | None = None  # of ``tls``, made when first needed
        # A TLS listener's handshakes and certificate checks: their modules only with one
        # (serve.preload imports them before -u switches user).
        self.handshake_log: HandshakeLog | None = None  # failed handshakes: a reason each, rate-limited
        if any(lst.kind == "tls" for lst in listeners):
            from stalkd.server.handshakelog import HandshakeLog
            from stalkd.server.recheck import CaIndex

            self.handshake_log = HandshakeLog()
            self._ca_index = CaIndex

    def warnings(self) -> list[str]:
        return [open_warning(lst.address) for lst in self.listeners
                if lst.kind == "plain" and not self.cfg.plain_network_ok and not is_loopback(lst.sock)]

    def describe(self) -> str:
        return ", ".join(f"{lst.address}" + ("" if lst.kind == "plain" else f" ({lst.kind})")
                         for lst in self.listeners)

    def addresses(self) -> list[str]:
        """Every listener's address as a client writes it (``tls://`` for the TLS ones)."""
        return [("tls://" if lst.kind == "tls" else "") + lst.address for lst in self.listeners]

    async def start(self, new_connection: Callable[[], Connection],
                    tube_of: Callable[[int], str | None], gate: Gate,
                    starts: Callable[[Callable[[], None]], None] | None = None) -> None:
        """``gate``: who may start a TLS handshake (the server's ``Registry``); ``starts``:
        when an admitted one starts (``Turns.start``: a few per loop turn; None: at once)."""
        loop = asyncio.get_running_loop()
        self._new_connection = new_connection
        self._tube_of = tube_of
        self._gate = gate
        self._starts = starts
        for i, lst in enumerate(self.listeners):
            if lst.kind == "tls":
                self.servers[i] = await loop.create_server(
                    self._tls_factory(lst), sock=lst.sock.dup(), backlog=BACKLOG)
            else:
                # a protocol by its methods, not its base (connection.py)
                factory = cast(Callable[[], asyncio.Protocol], new_connection)
                self.servers[i] = await loop.create_server(factory, sock=lst.sock, backlog=BACKLOG)

    def _tls_factory(self, lst: Listener) -> Callable[[], Handshake]:
        from stalkd.server.handshake import Handshake

        def connection() -> Connection:
            c = self._new_connection()
            c.admit = lambda conn: self._admit(conn, lst)
            return c

        def factory() -> Handshake:
            return Handshake(self._gate, self._context, self.cfg.handshake_timeout, connection,
                             self._handshake_failed, self._starts)

        return factory

    def _handshake_failed(self, peer: str, e: BaseException) -> None:
        assert self.handshake_log is not None  # a TLS listener's
        self.handshake_log.failed(peer, e, now=time.monotonic())

    def _context(self) -> ssl.SSLContext:
        assert self.tls is not None
        return self.tls

    def _admit(self, c: Connection, lst: Listener) -> CommandPolicy | None:
        log.info("conn %d from %s over TLS on %s as %s", c.id, c.peer, lst.address,
                 c.identity or "(no client certificate)")
        if self.tls is not None:
            if self._cas is None or self._cas.ctx is not self.tls:
                self._cas = self._ca_index(self.tls)
            self._open[c] = self._cas.issuers(_peercert(c))
        if self.acl is None:
            return None
        from stalkd.server.acl import ConnPolicy

        return ConnPolicy(self._current_acl, c.identity, self._tube_of)

    def _current_acl(self) -> Acl:
        assert self.acl is not None
        return self.acl

    async def reload(self) -> bool:
        """SIGHUP: new TLS contexts and ACL for what comes next; False (and a log line) if a
        file cannot be used, the running ones then stay."""
        from stalkd.server.acl import AclError, load_acl
        from stalkd.server.tls import TlsConfigError, server_context

        try:
            tls = server_context(self.tls_files) if self.tls_files is not None else None
            acl = load_acl(self.cfg.acl) if self.cfg.acl is not None else None
        except (TlsConfigError, AclError) as e:
            log.error("SIGHUP: reload refused, keeping the running certificates and ACL: %s", e)
            return False
        before, self.acl = self.acl, acl
        self._recheck(tls, before)
        if tls is not None:
            self.tls = tls  # read by each handshake as it starts (_context)
        log.info("SIGHUP: reloaded%s%s", " TLS certificates" if tls is not None else "",
                 f", ACL {self.cfg.acl}" if acl is not None else "")
        return True

    def _recheck(self, tls: ssl.SSLContext | None, before: Acl | None) -> None:
        """Close the open TLS connections the new client CAs or ACL no longer admit."""
        from stalkd.server.acl import ConnPolicy  # a reload: the ACL module is loaded by now
        from stalkd.server.recheck import CaIndex, untrusted
        now = time.time()
        held = CaIndex(tls).held if tls is not None else frozenset()
        for c, trusted_by in list(self._open.items()):
            if c.closing or c.lost:
                continue
            why = None
            if tls is not None and self.tls_files is not None and self.tls_files.client_ca is not None:
                why = untrusted(held, trusted_by, _peercert(c), now)
            policy = c.policy
            if why is None and before is not None and self.acl is not None and isinstance(policy, ConnPolicy):
                why = policy.revoked(before)
            if why is not None:
                log.warning("SIGHUP: closing conn %d from %s as %s: %s", c.id, c.peer,
                            c.identity or "(no client certificate)", why)
                c.refuse(abort=False)

    def close(self) -> None:
        """Stop accepting; remove our UNIX socket files."""
        for srv in self.servers.values():
            srv.close()
        for lst in self.listeners:
            if lst.kind == "tls":
                lst.sock.close()  # the servers closed duplicates; this is the original
            lst.remove_file()


def _peercert(c: Connection) -> dict[str, object] | None:
    ssl_object = c.transport.get_extra_info("ssl_object") if c.transport is not None else None
    return ssl_object.getpeercert() if ssl_object is not None else None
