"""Issue 30: a burst of TLS client hellos is started a few per loop turn (server/turns.py's
``start``, server/handshake.py), not all in one turn: the queue on its own on a counting
clock, then real handshakes on the loops the server runs on, queued and all served."""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Callable

import pytest

from server.tlsutil import Pair, issue, make_ca
from stalkd.engine import Engine
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.handshake import Handshake
from stalkd.server.turns import Turns


def test_at_most_starts_per_turn_the_rest_in_order() -> None:
    later: list[Callable[[], None]] = []
    t = Turns(later.append, starts=2, clock=lambda: 0.0)
    ran: list[int] = []
    # Given five starts asked in one turn
    for i in range(5):
        t.start(functools.partial(ran.append, i))
    # Then two run now and three wait
    assert ran == [0, 1] and t.waiting() == 3
    # And each later turn runs two more, in the order asked, before any asked since
    later.pop(0)()
    t.start(lambda: ran.append(5))
    assert ran == [0, 1, 2, 3] and t.waiting() == 2
    later.pop(0)()
    assert ran == [0, 1, 2, 3, 4, 5] and t.waiting() == 0
    # And a turn with room runs a new start at once
    later.pop(0)()
    t.start(lambda: ran.append(6))
    assert ran[-1] == 6


@pytest.fixture(scope="module")
def server_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pair, Pair]:
    d = tmp_path_factory.mktemp("certs")
    ca = make_ca(d, "ca")
    return ca, issue(d, ca, "server", "/CN=localhost", server=True)


def _loops() -> list[Callable[[], asyncio.AbstractEventLoop]]:
    loops: list[Callable[[], asyncio.AbstractEventLoop]] = [asyncio.new_event_loop]
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a default dependency on POSIX
        return loops
    return [*loops, uvloop.new_event_loop]


@pytest.mark.parametrize("new_loop", _loops(), ids=lambda f: f.__module__.split(".")[0])
def test_handshakes_whose_start_waited_are_all_served(
        new_loop: Callable[[], asyncio.AbstractEventLoop], server_pair: tuple[Pair, Pair]) -> None:
    ca, pair = server_pair
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(pair.cert, pair.key)
    client_ctx = ssl.create_default_context(cafile=ca.cert)
    n = 8

    async def main() -> None:
        loop = asyncio.get_running_loop()
        srv = Server(Config(), Engine())
        held: list[Callable[[], None]] = []  # the starts, let go below
        made: list[Handshake] = []

        def factory() -> Handshake:
            made.append(h := Handshake(srv.conns, lambda: server_ctx, 30.0, srv.new_connection,
                                       None, held.append))
            return h

        listener = await loop.create_server(factory, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]

        async def client() -> bytes:
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                                 server_hostname="localhost")
            w.write(b"list-tube-used\r\n")
            reply = await r.readline()
            w.close()
            return reply

        # Given n clients whose hellos all came while their starts waited
        clients = asyncio.gather(*(client() for _ in range(n)))
        for _ in range(10_000):
            if len(made) == n and all(h.early for h in made):
                break
            await asyncio.sleep(0.001)
        assert len(held) == n and all(h.early and h.task is None for h in made)
        # and nothing more is read from them meanwhile
        assert not any(h.transport is not None and h.transport.is_reading() for h in made)
        # When the turns let them start, one per loop turn
        turns = Turns(loop.call_soon, starts=1)
        for f in held:
            turns.start(f)
        assert turns.waiting() == n - 1
        # Then every one is served, the hello read before its start handed over
        replies = await asyncio.wait_for(clients, 60)
        assert replies == [b"USING default\r\n"] * n
        assert turns.waiting() == 0 and srv.conns.handshakes == 0
        listener.close()
        await listener.wait_closed()

    loop = new_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_client_silent_or_gone_before_its_start_ends_its_count(server_pair: tuple[Pair, Pair]) -> None:
    _, pair = server_pair
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pair.cert, pair.key)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        srv = Server(Config(), Engine())
        waiting: list[Callable[[], None]] = []
        failed: list[str] = []

        def factory() -> Handshake:
            return Handshake(srv.conns, lambda: ctx, 0.2, srv.new_connection,
                             lambda _peer, e: failed.append(str(e)), waiting.append)

        listener = await loop.create_server(factory, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]

        async def until(cond: Callable[[], bool]) -> None:
            for _ in range(10_000):
                if cond():
                    return
                await asyncio.sleep(0.001)
            raise AssertionError("condition never met")

        # Given a client that sends no hello: no start is asked, and it is cut at the deadline
        silent_r, silent = await asyncio.open_connection("127.0.0.1", port)
        await until(lambda: srv.conns.handshakes == 1)
        await until(lambda: srv.conns.handshakes == 0)
        assert waiting == [] and failed == ["no client hello within 0.2 s"]
        assert await silent_r.read() == b""
        silent.close()
        # Given a client whose start waits, which hangs up meanwhile
        _, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"\x16")  # the first byte of a hello
        await until(lambda: bool(waiting))
        w.close()
        # Then once its start comes its count ends, and nothing is served for it
        waiting.pop()()
        await until(lambda: srv.conns.handshakes == 0)
        assert len(failed) == 2 and len(srv.conns) == 0
        listener.close()
        await listener.wait_closed()

    asyncio.run(main())
