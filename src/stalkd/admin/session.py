"""An admin request as a connection of its own: its commands run through ``Server.execute``.

The admin API changes jobs only with the protocol's own commands (delete, kick-job, use, put,
reserve-job, bury, pause-tube), run by the same ``Server.execute`` as a client's, so every
change is admitted against the WAL's free space, written to the WAL in the server's next batch
and visible in the Spark history like any other. ``AdminSession`` is a ``Connection`` without a
socket: replies are collected instead of written, and :meth:`AdminSession.durable` waits until
the server reports the last of them durable (its group-commit barrier), so an API reply is sent
only once its changes would survive a crash, exactly as a protocol reply.

Ensures: a session is registered with the server (and the engine) while it is open and removed
on ``close``; it never blocks in reserve; its ids never collide with socket connections'.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING

from stalkd.engine.commands import AnyReply, Command
from stalkd.server.conn import Connection

if TYPE_CHECKING:
    from stalkd.server.app import Server

__all__ = ["AdminSession", "ServerBusy"]

# Socket connections count up from 1; admin sessions use ids far above them.
_IDS = itertools.count(1 << 48)


class ServerBusy(RuntimeError):
    """The server is at --max-connections, stopping, or failed: it runs no admin command."""


class AdminSession(Connection):
    """One admin request's connection. Use ``async with AdminSession(server) as s``."""

    def __init__(self, server: Server) -> None:
        cfg = server.config
        super().__init__(server, next(_IDS), cfg.max_job_size, cfg.max_output)
        self.peer = "admin"
        self.barrier = 0  # the server batch the last reply's records belong to
        self.last: AnyReply | None = None  # the reply to the last command run
        self._done: asyncio.Future[None] | None = None

    async def __aenter__(self) -> AdminSession:
        srv = self.server
        if srv.stopping or srv.failed is not None:
            raise ServerBusy("the server is stopping")
        if len(srv.conns) >= srv.config.max_connections:
            raise ServerBusy("the server is at --max-connections")
        srv.connected(self)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.server.disconnected(self, None)

    def run(self, cmd: Command) -> AnyReply:
        """Run one command now (on the loop thread) and return its reply (not yet durable)."""
        self.last = None
        self.server.execute(self, cmd)
        reply = self.last
        if reply is None:
            raise ServerBusy(f"no reply to {cmd!r}")  # a reserve that blocked: never sent here
        return reply

    async def durable(self, timeout: float = 30.0) -> None:
        """Wait until every reply so far is durable under the server's policy."""
        srv = self.server
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.barrier > srv.durable:
            if srv.failed is not None:
                raise ServerBusy(f"storage failed: {srv.failed}")
            if loop.time() > deadline:
                raise TimeoutError("the WAL did not become durable in time")
            self._done = loop.create_future()
            srv.hold(self)
            # Woken by release_held after the sync; a fatal error wakes nobody, hence the bound.
            await asyncio.wait({self._done}, timeout=0.5)
            self._done = None

    # --- what the server calls on a connection ----------------------------------------------

    def send(self, reply: AnyReply | None, barrier: int) -> None:
        if reply is None:
            self.waiting = True
            return
        self.last = reply
        if barrier > self.barrier:
            self.barrier = barrier

    def release_held(self, durable: int) -> bool:
        if durable >= self.barrier and self._done is not None and not self._done.done():
            self._done.set_result(None)
        return durable < self.barrier

    def flush(self) -> None:
        pass

    def abort_after_flush(self) -> None:
        pass
