"""Connection unit behaviour against a recording transport (the socket is the boundary)."""

from __future__ import annotations

import asyncio

from stalkd.engine import Engine
from stalkd.protocol.commands import Reply, YamlDict
from stalkd.server.app import Server
from stalkd.server.budget import GRAIN
from stalkd.server.config import Config


class RecordingTransport:
    def __init__(self, ssl_object: object | None = None) -> None:
        self.sent: list[bytes] = []
        self.buffers: list[int] = []  # how many buffers each write call handed over
        self.closed = False
        self.reading = True
        self.ssl_object = ssl_object

    def write(self, data: bytes) -> None:
        self.sent.append(data)
        self.buffers.append(1)

    def writelines(self, parts: list[bytes]) -> None:
        self.sent.append(b"".join(parts))
        self.buffers.append(len(parts))

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_extra_info(self, key: str) -> object:
        return {"peername": ("127.0.0.1", 1), "ssl_object": self.ssl_object}.get(key)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_an_unencodable_reply_becomes_internal_error_in_order() -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        c = srv.new_connection()
        t = RecordingTransport()
        c.connection_made(t)  # type: ignore[arg-type]
        c.send(Reply("USING", ("a",)), 0)
        c.send(YamlDict("stats", {"pid": 1}), 0)  # most keys missing: a bug, not a crash
        c.send(Reply("DELETED"), 0)
        c.flush()
        assert b"".join(t.sent) == b"USING a\r\nINTERNAL_ERROR\r\nDELETED\r\n"

    asyncio.run(main())


def test_pipelined_bytes_split_anywhere_give_the_same_replies() -> None:
    async def main() -> None:
        stream = b"use t\r\nput 0 0 60 3\r\nabc\r\npeek 1\r\ndelete 1\r\nlist-tube-used\r\n"
        expected = b"USING t\r\nINSERTED 1\r\nFOUND 1 3\r\nabc\r\nDELETED\r\nUSING t\r\n"
        for cut in range(1, len(stream)):
            srv = Server(Config(), Engine())
            c = srv.new_connection()
            t = RecordingTransport()
            c.connection_made(t)  # type: ignore[arg-type]
            c.data_received(stream[:cut])
            c.data_received(stream[cut:])
            assert b"".join(t.sent) == expected, cut

    asyncio.run(main())


def test_a_tls_transport_gets_a_pipelines_replies_as_one_buffer() -> None:
    # A TLS transport seals every buffer it is handed as its own record(s): one buffer per flush
    # keeps a pipeline's replies in as few records as their size allows.
    async def main() -> None:
        stream = b"use t\r\n" + b"put 0 0 60 1\r\nx\r\n" * 5 + b"list-tube-used\r\n"
        for tls in (False, True):
            srv = Server(Config(), Engine())
            c = srv.new_connection()
            t = RecordingTransport(ssl_object=object() if tls else None)
            c.connection_made(t)  # type: ignore[arg-type]
            c.data_received(stream)
            assert b"".join(t.sent) == b"USING t\r\n" + b"".join(b"INSERTED %d\r\n" % i for i in range(1, 6)) + b"USING t\r\n"
            if tls:
                assert t.buffers == [1]
            else:
                assert len(t.sent) == 1 and t.buffers[0] > 1

    asyncio.run(main())


class UnreadTransport(RecordingTransport):
    """A client that reads nothing until told: everything written stays unsent."""

    def __init__(self) -> None:
        super().__init__()
        self.drained = 0

    def get_write_buffer_size(self) -> int:
        return sum(len(b) for b in self.sent) - self.drained


def test_small_replies_left_unsent_are_charged_once_they_add_up_to_a_grain() -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        c = srv.new_connection()
        t = UnreadTransport()
        c.connection_made(t)  # type: ignore[arg-type]
        reply = Reply("USING", ("a" * 100,))
        # Given one small reply flushed at a time to a client that reads none of them
        while t.get_write_buffer_size() < GRAIN:
            assert c.charged == 0
            c.send(reply, 0)
            c.flush()
        # Then the budget counts them as soon as they reach a grain
        assert c.charged == t.get_write_buffer_size() >= GRAIN
        # When the client reads them all, the next flush reports that it holds nothing
        t.drained = t.get_write_buffer_size()
        c.send(reply, 0)
        c.flush()
        assert c.charged == 0
        # And the replies that pile up again are counted again once they reach a grain
        t.drained = 0
        t.sent.clear()
        while t.get_write_buffer_size() < GRAIN:
            assert c.charged == 0
            c.send(reply, 0)
            c.flush()
        assert c.charged == t.get_write_buffer_size()

    asyncio.run(main())


def test_a_role_set_or_changed_after_start_refuses_and_lets_again_as_it_says() -> None:
    async def main() -> None:
        from stalkd.replication.role import Role

        srv = Server(Config(), Engine())
        c = srv.new_connection()
        t = RecordingTransport()
        c.connection_made(t)  # type: ignore[arg-type]
        old = srv.role
        role = Role(None)
        srv.role = role
        role.standby = True
        c.data_received(b"put 0 0 60 1\r\na\r\n")
        old.standby = True  # the replaced role no longer decides
        role.standby = False
        c.data_received(b"put 0 0 60 1\r\nb\r\n")
        srv.role = Role(None, standby=True)
        c.data_received(b"put 0 0 60 1\r\nc\r\n")
        assert b"".join(t.sent) == b"NOT_PRIMARY\r\nINSERTED 1\r\nNOT_PRIMARY\r\n"

    asyncio.run(main())


def test_replies_go_to_the_current_transport_and_none_to_a_closing_one() -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        c = srv.new_connection()
        t = RecordingTransport()
        c.connection_made(t)  # type: ignore[arg-type]
        c.data_received(b"use a\r\n")
        t2 = RecordingTransport()
        c.transport = t2  # type: ignore[assignment]
        c.data_received(b"use b\r\n")
        t2.closed = True
        c.data_received(b"use c\r\n")
        assert (t.sent, t2.sent) == ([b"USING a\r\n"], [b"USING b\r\n"])

    asyncio.run(main())
