"""Held replies (connection.py, barriers.py): replies wait for their batch in command order, the
first one held in the connection's own fields and the later ones behind it, and the barriers
count a connection as holding exactly while it holds something (one holder in a field of its
own, others in a set)."""

from __future__ import annotations

import asyncio

from stalkd.engine import Engine
from stalkd.protocol.commands import Close, JobReply, Reply
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.connection import Connection

from .test_conn import RecordingTransport


def _connected(srv: Server) -> tuple[Connection, RecordingTransport]:
    c = srv.new_connection()
    t = RecordingTransport()
    c.connection_made(t)  # type: ignore[arg-type]
    return c, t


def _durable(srv: Server, batch: int) -> None:
    srv.barriers.durable = batch
    srv.barriers.release_held()


def test_held_replies_leave_in_order_as_their_batches_become_durable() -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        c, t = _connected(srv)
        # Given replies tagged with batches 1, 1 and 2, then one that waits for nothing, then a quit
        c.send(Reply("INSERTED", (1,)), 1)
        c.send(JobReply("RESERVED", 1, b"ab"), 1)
        c.send(Reply("INSERTED", (2,)), 2)
        c.send(Reply("DELETED"), 0)
        c.send(Close(), 0)
        c.flush()
        # Then nothing leaves before batch 1 is durable
        assert t.sent == [] and c.holding and srv.barriers.holders() == [c]
        # When batch 1 is durable, then its two replies leave, and the rest stays behind batch 2
        _durable(srv, 1)
        assert b"".join(t.sent) == b"INSERTED 1\r\nRESERVED 1 2\r\nab\r\n"
        assert c.held_bytes == len(b"INSERTED 2\r\nDELETED\r\n") and not t.closed
        # When batch 2 is durable, then everything left goes, the quit closes, nothing is held
        _durable(srv, 2)
        assert b"".join(t.sent).endswith(b"INSERTED 2\r\nDELETED\r\n") and t.closed
        assert not c.holding and c.held_bytes == 0 and srv.barriers.holders() == []

    asyncio.run(main())


def test_every_holder_is_released_and_each_stops_holding_on_its_own() -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        (a, ta), (b, tb), (c, tc) = _connected(srv), _connected(srv), _connected(srv)
        # Given three connections holding replies for different batches
        a.send(Reply("INSERTED", (1,)), 1)
        b.send(Reply("INSERTED", (2,)), 2)
        c.send(Reply("INSERTED", (3,)), 1)
        assert sorted(h.id for h in srv.barriers.holders()) == [a.id, b.id, c.id]
        # When batch 1 is durable, then both of its holders are released and stop holding
        _durable(srv, 1)
        assert ta.sent == [b"INSERTED 1\r\n"] and tc.sent == [b"INSERTED 3\r\n"] and tb.sent == []
        assert srv.barriers.holders() == [b]
        # And one that holds again is counted once, with the one still holding
        a.send(Reply("INSERTED", (4,)), 3)
        a.send(Reply("INSERTED", (5,)), 3)
        assert sorted(h.id for h in srv.barriers.holders()) == [a.id, b.id]
        _durable(srv, 3)
        assert ta.sent[1:] == [b"INSERTED 4\r\n", b"INSERTED 5\r\n"] or b"".join(ta.sent[1:]) == b"INSERTED 4\r\nINSERTED 5\r\n"
        assert tb.sent == [b"INSERTED 2\r\n"] and srv.barriers.holders() == []

    asyncio.run(main())


def test_a_fence_turns_every_held_reply_into_its_answer_and_keeps_the_quit_behind_them() -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        c, t = _connected(srv)
        # Given two held replies and a quit behind them
        c.send(Reply("INSERTED", (1,)), 5)
        c.send(JobReply("RESERVED", 1, b"abc"), 6)
        c.send(Close(), 0)
        # When the barriers give up on them with NOT_PRIMARY
        srv.barriers.abandon((b"NOT_PRIMARY\r\n",))
        # Then each held reply is answered NOT_PRIMARY, in order, then the connection closes
        assert b"".join(t.sent) == b"NOT_PRIMARY\r\nNOT_PRIMARY\r\n" and t.closed
        assert not c.holding and c.held_bytes == 0 and srv.barriers.holders() == []

    asyncio.run(main())


def test_a_lost_connection_is_no_longer_held() -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        c, t = _connected(srv)
        c.send(Reply("INSERTED", (1,)), 1)
        c.connection_lost(None)
        assert not c.holding and srv.barriers.holders() == []
        _durable(srv, 1)
        assert t.sent == []

    asyncio.run(main())
