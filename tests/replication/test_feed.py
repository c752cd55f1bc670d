"""The receiver's feed (its stream after the handshake, taken over from the StreamReader):
bytes in order, the reader's leftovers first, reading paused past the limit and resumed by a
read, the end of the stream seen. Over a real loopback connection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from stalkd.replication.receiver import _feed


async def _until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


async def _pair(serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
                ) -> tuple[asyncio.Server, asyncio.StreamReader, asyncio.StreamWriter]:  # fmt: skip
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return server, reader, writer


def test_the_feed_gives_the_readers_leftovers_first_then_what_follows_in_order() -> None:
    async def main() -> None:
        go = asyncio.Event()
        done = asyncio.Event()

        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(b"STREAMING\r\n")
            await go.wait()
            for i in range(50):
                w.write(b"[%d]" % i)
                await w.drain()
            w.close()
            done.set()

        server, reader, writer = await _pair(serve)
        assert await reader.readuntil(b"\r\n") == b"STREAMING\r\n"
        reader.feed_data(b"left-over;")  # as if it had arrived with the answer
        feed = await _feed(reader, writer, 1 << 20)
        go.set()
        got = b""
        while (data := await feed.read()) != b"":
            got += data
        assert got == b"left-over;" + b"".join(b"[%d]" % i for i in range(50))
        assert await feed.read() == b""  # the end stays the end
        await done.wait()
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_the_feed_pauses_reading_past_its_limit_and_a_read_resumes_it() -> None:
    limit = 4096
    sent = bytes(range(256)) * 256  # 64 KiB: far past the limit

    async def main() -> None:
        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(b"STREAMING\r\n" + sent)
            await w.drain()
            await r.read()  # until the client closes

        server, reader, writer = await _pair(serve)
        assert await reader.readuntil(b"\r\n") == b"STREAMING\r\n"
        feed = await _feed(reader, writer, limit)
        transport = writer.transport
        await _until(lambda: feed._size > limit, "the feed past its limit")
        assert not transport.is_reading()  # paused: the rest waits in the kernel
        got = await feed.read()
        assert len(got) > limit
        assert transport.is_reading()
        while len(got) < len(sent):
            got += await feed.read()
        assert got == sent
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_a_connection_cut_ends_the_feed_with_its_error_or_at_its_end() -> None:
    async def main() -> None:
        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(b"STREAMING\r\nlast words")
            await w.drain()
            w.transport.abort()

        server, reader, writer = await _pair(serve)
        assert await reader.readuntil(b"\r\n") == b"STREAMING\r\n"
        feed = await _feed(reader, writer, 1 << 20)
        got = b""
        try:
            while (data := await feed.read()) != b"":
                got += data
        except ConnectionError:
            pass  # a reset may come before or after the bytes: both say the stream ended
        assert b"last words".startswith(got)  # nothing made up, nothing out of order
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
