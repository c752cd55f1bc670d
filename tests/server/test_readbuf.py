"""How a connection reads: the loop's own reads by default, a bounded shared buffer under a small
``--max-output`` (server/readbuf.py); both give the same replies, over a real socket too."""

from __future__ import annotations

import asyncio
import socket

import pytest
from tests.server.test_conn import RecordingTransport

from stalkd.engine import Engine
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.connection import READ_MAX
from stalkd.server.storage import MemoryStorage

STREAM = b"use t\r\nwatch t\r\nput 0 0 60 3\r\nabc\r\nreserve-with-timeout 0\r\ndelete 1\r\nlist-tube-used\r\n"
REPLIES = b"USING t\r\nWATCHING 2\r\nINSERTED 1\r\nRESERVED 1 3\r\nabc\r\nDELETED\r\nUSING t\r\n"


def test_the_default_reads_as_much_as_the_loop_and_a_small_limit_reads_less() -> None:
    async def main() -> None:
        big = Server(Config(), Engine()).new_connection()
        assert not isinstance(big, asyncio.BufferedProtocol)
        assert big.read_size == READ_MAX
        small = Server(Config(max_output=64 * 1024), Engine()).new_connection()
        assert isinstance(small, asyncio.BufferedProtocol)
        assert len(small.get_buffer(-1)) == small.read_size == 16 * 1024

    asyncio.run(main())


def test_the_compiled_connection_follows_the_build_and_the_switch() -> None:
    from stalkd.extensions import extensions_disabled
    from stalkd.server import connection, fastconn
    from stalkd.server.connection import Connection
    from stalkd.server.readbuf import BufferedConnection

    compiled = not (connection.__file__ or "").endswith(".py")
    assert ("cython" if compiled else "python") == fastconn.IMPLEMENTATION
    if extensions_disabled():
        assert not compiled  # the switch runs the .py file even where a build exists

    async def main() -> None:
        big = Server(Config(), Engine()).new_connection()
        small = Server(Config(max_output=64 * 1024), Engine()).new_connection()
        assert type(big) is Connection and type(small) is BufferedConnection

    asyncio.run(main())


def test_reads_through_the_shared_buffer_give_the_same_replies_split_anywhere() -> None:
    async def main() -> None:
        for cut in range(1, len(STREAM)):
            c = Server(Config(max_output=64 * 1024), Engine()).new_connection()
            assert isinstance(c, asyncio.BufferedProtocol)
            t = RecordingTransport()
            c.connection_made(t)  # type: ignore[arg-type]
            for part in (STREAM[:cut], STREAM[cut:]):
                buf = c.get_buffer(-1)
                buf[: len(part)] = part
                c.buffer_updated(len(part))
            assert b"".join(t.sent) == REPLIES, cut

    asyncio.run(main())


@pytest.mark.parametrize("max_output", [4 * 2**20, 64 * 1024])
def test_a_real_socket_gets_its_replies_with_either_kind_of_connection(max_output: int) -> None:
    import uvloop

    async def main() -> bytes:
        srv = Server(Config(max_output=max_output), Engine(records=False), MemoryStorage())
        loop = asyncio.get_running_loop()
        server = await loop.create_server(srv.new_connection, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        def client() -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(STREAM)
                got = b""
                while got.count(b"\r\n") < REPLIES.count(b"\r\n"):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
                return got

        try:
            return await loop.run_in_executor(None, client)
        finally:
            server.close()

    assert uvloop.run(main()) == REPLIES
