"""Issue 30, loop fairness: a connection runs at most ``STEP_COMMANDS`` commands per loop turn,
so one loop turn over many busy connections stays short; the rest of what it read runs at the
next turn, after the other connections ready then, and its replies keep their order."""

from __future__ import annotations

import asyncio

from tests.server.test_conn import RecordingTransport

from stalkd.engine import Engine
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.connection import STEP_COMMANDS


def test_a_long_pipeline_runs_a_share_per_turn_and_others_are_served_between() -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        busy, other = srv.new_connection(), srv.new_connection()
        tb, to = RecordingTransport(), RecordingTransport()
        busy.connection_made(tb)  # type: ignore[arg-type]
        other.connection_made(to)  # type: ignore[arg-type]
        n = 3 * STEP_COMMANDS + 10
        busy.data_received(b"".join(b"use t%d\r\n" % i for i in range(n)))
        # one share ran; reading stops until the rest has run
        assert b"".join(tb.sent).count(b"USING") == STEP_COMMANDS
        assert not tb.reading
        # another client is served at once, not after the whole pipeline
        other.data_received(b"use mine\r\n")
        assert b"".join(to.sent) == b"USING mine\r\n"
        turns = 0
        while b"".join(tb.sent).count(b"USING") < n:
            await asyncio.sleep(0)  # one loop turn
            turns += 1
            assert b"".join(tb.sent).count(b"USING") <= (turns + 1) * STEP_COMMANDS
            assert turns <= n  # every turn runs a share: this ends
        assert turns == 3
        assert b"".join(tb.sent) == b"".join(b"USING t%d\r\n" % i for i in range(n))  # in order
        assert tb.reading  # the backlog ran: reading again

    asyncio.run(main())
