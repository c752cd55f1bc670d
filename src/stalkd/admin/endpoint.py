"""Start and stop the admin endpoint beside a running server (``stalkd serve --admin``).

The server's start-up calls, in order: ``AdminEndpoint(cfg)`` and ``wrap_storage`` before the
``Server`` is built (so the WAL's timings are seen), ``start(server)`` once recovery is done
(it listens from then on, so /readyz never answers before the jobs are loaded), ``stop()``
when the server stops. The endpoint runs on the server's event loop: no thread, no lock.
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING

from stalkd.admin.metrics import Instruments, TimedStorage
from stalkd.secretfile import read_secret
from stalkd.server.config import is_loopback

if TYPE_CHECKING:
    from aiohttp import web

    from stalkd.server.app import Server, Storage
    from stalkd.server.config import Config

__all__ = ["AdminEndpoint", "read_token"]

log = logging.getLogger("stalkd.admin")


def read_token(path: str) -> str:
    """The bearer token in ``path`` (``stalkd.secretfile``: a file others may read is refused:
    anyone who can read it can empty the server)."""
    return read_secret(path, "token")


class AdminEndpoint:
    """The admin HTTP endpoint of one server."""

    def __init__(self, cfg: Config, ssl_context: ssl.SSLContext | None = None) -> None:
        """``ssl_context``: serve HTTPS (the seam for the TLS listeners' certificate flags)."""
        assert cfg.admin is not None
        self.cfg = cfg
        self.ssl_context = ssl_context
        self.host, self.port = cfg.admin
        self.token = read_token(cfg.admin_token_file) if cfg.admin_token_file else None
        self.acl = None
        if cfg.admin_tls and ssl_context is None:
            from stalkd.server.tls import TlsFiles, server_context

            assert cfg.tls_cert is not None
            self.ssl_context = server_context(TlsFiles(cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca))
            if cfg.acl is not None and cfg.tls_client_ca is not None:
                from stalkd.server.acl import load_acl

                self.acl = load_acl(cfg.acl)
        self.instruments = Instruments()
        self.storage: TimedStorage | None = None
        self._runner: web.AppRunner | None = None

    def wrap_storage(self, storage: Storage | None) -> Storage | None:
        if storage is None:
            return None
        self.storage = TimedStorage(storage, self.instruments)
        return self.storage

    async def start(self, server: Server) -> str:
        """Listen; returns the bound address (``host:port``, the real port when 0 was asked)."""
        from aiohttp import web

        # stalkd.worker.*: what the first /workers or dead-letter read would otherwise import
        # on the loop, with clients waiting (tens of ms); imported before the endpoint listens
        import stalkd.worker.actions
        import stalkd.worker.presence  # noqa: F401
        from stalkd.admin.http import Guard, make_app
        from stalkd.admin.ops import AdminOps

        self.instruments.engine = server.engine
        self.instruments.clock = server.clock
        server.observer = self.instruments.observe
        app = make_app(server, AdminOps(server), self.instruments, self.storage,
                       Guard(self.token, self.acl))
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.25)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, backlog=64, ssl_context=self.ssl_context)
        await site.start()
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []  # noqa: SLF001 - aiohttp has no public getter
        port = sockets[0].getsockname()[1] if sockets else self.port
        self.port = port
        host = f"[{self.host}]" if ":" in self.host else self.host
        address = f"{host}:{port}"
        scheme = "https" if self.ssl_context is not None else "http"
        log.info("admin endpoint on %s://%s/ (metrics /metrics, dashboard /)%s", scheme, address,
                 ", bearer token required" if self.token else "")
        if self.ssl_context is None and not is_loopback(self.host):
            log.warning("admin endpoint on %s without TLS: the bearer token and every job body "
                        "it shows cross the network in clear; bind it to 127.0.0.1 and tunnel, "
                        "or put it behind a TLS proxy", address)
        return address

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
