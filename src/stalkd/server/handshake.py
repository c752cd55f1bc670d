"""A TLS connection before its handshake is done: admitted, counted and bounded in time.

A TLS listener accepts plain TCP and runs each handshake itself (``loop.start_tls``), so a
connection is looked at before any TLS state exists for it: the server's ``Registry`` decides
whether it may start a handshake (``begin_handshake``: handshakes in progress count in
``--max-connections`` with the open connections, and at most ``--max-handshakes-per-address``
come from one address at once). A refused one is cut at once. A handshake that does not finish
within ``--handshake-timeout`` is cut too; either way it stops counting when it ends. Once
done, the server's ``Connection`` takes the TLS transport as if asyncio had made it.

An admitted handshake starts once its client hello has come, when the server's turns let it
(``starts``: ``Turns.start``, a few per loop turn): until then its reading is paused and the
hello waits here, so the crypto of a burst of hellos is spread over turns instead of holding
one (started before its hello, a handshake's crypto runs whenever the hello comes, with all
the others that came with it). A client that sends no hello within ``--handshake-timeout`` is
cut as one that does not finish.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Protocol, cast

from stalkd.server.connection import Connection

__all__ = ["Handshake", "Gate", "address_of"]

log = logging.getLogger("stalkd.server")


class Gate(Protocol):
    """Who may start a handshake (``stalkd.server.registry.Registry``)."""

    def begin_handshake(self, address: str) -> bool: ...
    def end_handshake(self, address: str) -> None: ...


def address_of(peer: object) -> str:
    """The client's address without its port (what the per-address cap counts).

    >>> address_of(("127.0.0.1", 5000)), address_of(("::1", 5000, 0, 0)), address_of(None)
    ('127.0.0.1', '::1', '?')
    """
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return "?" if not peer else str(peer)


class Handshake(asyncio.Protocol):
    """The protocol of a TLS listener's accepted socket until its handshake is done."""

    def __init__(self, gate: Gate, context: Callable[[], ssl.SSLContext], timeout: float,
                 connection: Callable[[], Connection], failed: Callable[[str, BaseException], None] | None = None,
                 starts: Callable[[Callable[[], None]], None] | None = None,
                 ) -> None:  # fmt: skip
        """``context``: the listener's TLS context now (a reload swaps it); ``connection``:
        makes the server's protocol object for a finished handshake; ``failed(peer, error)``:
        told of each handshake that failed (``handshakelog``: a log line with the reason);
        ``starts(f)``: runs ``f``, the handshake's start, when the loop has room for it
        (``Turns.start``; None: at once)."""
        self.failed = failed
        self.starts = starts
        self.transport: asyncio.Transport | None = None
        self.gone = False  # the client left before the handshake started
        self.gate = gate
        self.context = context
        self.timeout = timeout
        self.connection = connection
        self.address = "?"
        self.counted = False
        self.task: asyncio.Task[None] | None = None
        self.early: list[bytes] = []  # read before start_tls took the transport over
        self.asked = False  # its start was asked of ``starts``
        self.timer: asyncio.TimerHandle | None = None  # the deadline until it starts

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t = cast(asyncio.Transport, transport)
        self.address = address_of(t.get_extra_info("peername"))
        if not self.gate.begin_handshake(self.address):
            t.abort()  # refused before any TLS state is made for it
            return
        self.counted = True
        self.transport = t
        self.timer = asyncio.get_running_loop().call_later(self.timeout, self._expire)

    def _expire(self) -> None:
        t = self.transport
        if self.task is not None or self.gone or t is None:
            return
        if self.failed is not None:
            self.failed(self.address, TimeoutError(f"no client hello within {self.timeout:g} s"))
        t.abort()
        self._end()

    def _start(self) -> None:
        t = self.transport
        if self.gone or t is None or self.task is not None:
            return
        if self.timer is not None:
            self.timer.cancel()  # start_tls's own deadline from here
        loop = asyncio.get_running_loop()
        self.task = loop.create_task(self._run(t))
        # uvloop starts reading after connection_made whatever it asked: the client hello may
        # come here first. start_tls's first step hands the transport to its TLS protocol and
        # queues that protocol's start; the hello goes to it right after (two turns, FIFO).
        loop.call_soon(loop.call_soon, self._hand_over_early, t)

    def data_received(self, data: bytes) -> None:
        self.early.append(bytes(data))
        if self.task is None and self.transport is not None and not self.gone:
            # The hello came: nothing more is read until the handshake starts (start_tls
            # reads again once its protocol has the transport), when the turns let it.
            self.transport.pause_reading()
            if not self.asked:
                self.asked = True
                if self.starts is None:
                    self._start()
                else:
                    self.starts(self._start)

    def _hand_over_early(self, t: asyncio.Transport) -> None:
        early, self.early = self.early, []
        proto = t.get_protocol()
        # uvloop's TLS protocol reads into buffers (get_buffer/buffer_updated) without being an
        # asyncio.BufferedProtocol subclass
        if not early or proto is self or not hasattr(proto, "buffer_updated"):
            return
        proto = cast(asyncio.BufferedProtocol, proto)
        for chunk in early:
            view = memoryview(chunk)
            while view:
                buf = memoryview(proto.get_buffer(len(view)))
                n = min(len(buf), len(view))
                buf[:n] = view[:n]
                proto.buffer_updated(n)
                view = view[n:]

    async def _run(self, t: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        early = _Early()
        try:
            tls = await loop.start_tls(t, early, self.context(), server_side=True,
                                       ssl_handshake_timeout=self.timeout)
        except Exception as e:  # noqa: BLE001 - a bad client's failure, whatever it is
            log.debug("TLS handshake from %s failed: %r", self.address, e)
            if self.failed is not None:
                self.failed(self.address, e)
            t.abort()
            return
        finally:
            self._end()
        if tls is None or early.lost:  # the transport closed meanwhile
            t.abort()
            return
        conn = self.connection()
        tls.set_protocol(cast(asyncio.Protocol, conn))  # a protocol by its methods (connection.py)
        conn.connection_made(tls)
        early.replay(conn)

    def _end(self) -> None:
        if self.counted:
            self.counted = False
            self.gate.end_handshake(self.address)

    def connection_lost(self, exc: Exception | None) -> None:
        # Lost before start_tls took the transport over: its task fails and ends the count.
        if self.task is None:
            self.gone = True
            if self.timer is not None:
                self.timer.cancel()
            self._end()


class _Early(asyncio.Protocol):
    """The TLS transport's protocol between the handshake's end and ``connection_made``: the
    transport reads on as soon as the handshake is done, before ``start_tls`` returns."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.eof = False
        self.lost = False

    def data_received(self, data: bytes) -> None:
        self.data.append(bytes(data))

    def eof_received(self) -> bool:
        self.eof = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True

    def replay(self, conn: Connection) -> None:
        """Hand ``conn`` what came meanwhile."""
        for chunk in self.data:
            conn.data_received(chunk)
        self.data = []
        if self.eof:
            conn.eof_received()
