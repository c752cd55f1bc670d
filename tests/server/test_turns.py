"""The loop's time shared turn by turn (server/turns.py): the queue on its own, then the
connection under a deadline (compiled or interpreted, whichever this build runs), on a clock
that counts calls (no wall time)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from server.test_conn import RecordingTransport
from stalkd.engine import Engine
from stalkd.node.serve import turn_yields
from stalkd.server.app import Server
from stalkd.server.config import Config, parse_args
from stalkd.server.connection import Connection
from stalkd.server.fastconn import IMPLEMENTATION
from stalkd.server.turns import Turns


class Ticks:
    """A clock that moves one unit each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


class Runner:
    def __init__(self, name: str, ran: list[str], again: Callable[[Runner], bool] = lambda r: False) -> None:
        self.name, self.ran, self.again = name, ran, again
        self.turns: Turns | None = None

    def run_deferred(self) -> None:
        self.ran.append(self.name)
        if self.again(self) and self.turns is not None:
            self.turns.defer(self)


def test_the_queue_runs_in_order_and_stops_at_each_turns_deadline() -> None:
    later: list[Callable[[], None]] = []
    t = Turns(later.append, budget=2.5, clock=Ticks())
    ran: list[str] = []
    # a, b, c past the deadline; b wants more each time it runs, once
    b_left = [1]

    def b_again(_r: Runner) -> bool:
        b_left[0] -= 1
        return b_left[0] >= 0

    rs = [Runner("a", ran), Runner("b", ran, b_again), Runner("c", ran)]
    for r in rs:
        r.turns = t
        t.defer(r)
    assert len(later) == 1 and len(t) == 3  # the turn that runs the queue is scheduled
    later.pop(0)()
    # the turn opens at one reading of the clock, each run reads it once more: a and b fit
    assert ran == ["a", "b"] and len(t) == 2
    later.pop(0)()
    # c first (it was queued before b went back), then b, which is done
    assert ran == ["a", "b", "c", "b"] and len(t) == 0
    later.pop(0)()
    assert later == []  # nothing queued: no more turns scheduled


# One connection class, compiled by Cython or interpreted (STALKD_NO_EXTENSIONS=1): the suite
# runs on both builds.
CLASSES = [Connection]
IDS = [IMPLEMENTATION]


def _connect(srv: Server, cls: type[Connection]) -> tuple[Connection, RecordingTransport]:
    c = cls(srv, srv.conns.next_id(), 65535, 4 * 2**20)
    t = RecordingTransport()
    c.connection_made(t)  # type: ignore[arg-type]
    return c, t


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_a_long_pipeline_waits_its_turn_and_a_light_client_does_not(cls: type[Connection]) -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        srv.turns = Turns(asyncio.get_running_loop().call_soon, budget=6, clock=Ticks())
        heavy, ht = _connect(srv, cls)
        light, lt = _connect(srv, cls)
        n = 300
        # Given one client pipelining n commands in one read
        heavy.data_received(b"list-tube-used\r\n" * n)
        # Then it ran some, stopped reading and waits in the queue
        done = b"".join(ht.sent).count(b"USING default\r\n")
        assert 0 < done < n and heavy.deferred and not ht.reading
        # Its next read runs nothing before its place in the queue comes
        heavy.data_received(b"list-tube-used\r\n")
        assert b"".join(ht.sent).count(b"\r\n") == done
        # A client with one command is answered at once, in the same turn
        light.data_received(b"peek 1\r\n")
        assert b"".join(lt.sent) == b"NOT_FOUND\r\n"
        # And the pipeline is served over the following turns, every reply in order
        for _ in range(10 * n):
            if not heavy.deferred:
                break
            await asyncio.sleep(0)
        assert b"".join(ht.sent) == b"USING default\r\n" * (n + 1)
        assert ht.reading and not heavy.deferred and len(srv.turns) == 0

    asyncio.run(main())


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_a_client_that_hangs_up_while_queued_is_dropped_from_the_queue(cls: type[Connection]) -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        srv.turns = Turns(asyncio.get_running_loop().call_soon, budget=6, clock=Ticks())
        heavy, ht = _connect(srv, cls)
        heavy.data_received(b"use t\r\n" * 100)
        assert heavy.deferred
        sent = len(ht.sent)
        heavy.connection_lost(None)
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(srv.turns) == 0 and len(ht.sent) == sent  # nothing ran for it once gone

    asyncio.run(main())


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_connections_the_budget_lets_go_together_share_the_turns(cls: type[Connection]) -> None:
    async def main() -> None:
        srv = Server(Config(), Engine())
        srv.turns = Turns(asyncio.get_running_loop().call_soon, budget=6, clock=Ticks())
        n, each = 20, 5
        conns = [_connect(srv, cls) for _ in range(n)]
        # Given n connections the memory budget stopped, each with commands read and not run
        for c, t in conns:
            c.hold_reading(True)
            c.data_received(b"list-tube-used\r\n" * each)
            assert not t.reading and t.sent == []

        def answered() -> int:
            return sum(b"".join(t.sent).count(b"USING default\r\n") for _, t in conns)

        # When the budget lets them all go at once (what MemoryBudget._release does)
        for c, _ in conns:
            c.hold_reading(False)
        assert all(not t.reading for _, t in conns)  # nobody reads before its place comes
        await asyncio.sleep(0)  # the next loop turn
        # Then that turn ran one turn's budget of their commands, not one per connection
        assert 0 < answered() < n
        # And every connection is served over the following turns, in order, and reads again
        for _ in range(10 * n * each):
            if answered() == n * each:
                break
            await asyncio.sleep(0)
        assert answered() == n * each
        assert all(t.reading and not c.deferred for c, t in conns) and len(srv.turns) == 0

    asyncio.run(main())


def test_a_small_read_from_another_connection_makes_the_next_turn_yield_the_cpu_once() -> None:
    later: list[Callable[[], None]] = []
    yielded: list[int] = []
    t = Turns(later.append, clock=Ticks(), yield_cpu=lambda: yielded.append(1))
    a, b, c = object(), object(), object()

    def next_turn() -> None:
        for f in later[:]:
            later.remove(f)
            f()

    # Many clients at one request each: the turn that read them yields once before sleeping
    t.read(a, 20)
    t.read(b, 20)
    t.read(c, 20)
    assert len(later) == 1 and not yielded
    next_turn()
    assert yielded == [1] and t.yields == 1
    # then c goes on alone: once more (a made the last yield), then no more turn after turn,
    # since a lone client's next request waits for this reply
    t.read(c, 20)
    next_turn()
    assert yielded == [1, 1]
    for _ in range(3):
        t.read(c, 20)
        assert not later
    # a pipelined read has work for the turn: no yield either, from any connection
    t.read(a, 7_000)
    assert not later
    # another connection's small read: the next turn yields again
    t.read(b, 20)
    next_turn()
    assert yielded == [1, 1, 1] and t.yields == 3


def test_turns_without_yield_reads_never_yield() -> None:
    later: list[Callable[[], None]] = []
    yielded: list[int] = []
    t = Turns(later.append, clock=Ticks(), yield_cpu=lambda: yielded.append(1), yield_reads=False)
    # Small reads from many clients, turn after turn: nothing is scheduled, nothing yields
    for _ in range(3):
        for who in (object(), object(), object()):
            t.read(who, 20)
        assert not later
    assert not yielded and t.yields == 0


@pytest.mark.parametrize(("flags", "yields"), [
    ([], False),  # in memory: replies go out at once
    (["-b", "DIR", "-F"], False),  # never
    (["-b", "DIR", "-f", "50"], False),  # every:50: the sync is on a timer, not per batch
    (["-b", "DIR"], True),  # always: a turn's replies share an fdatasync
    (["-b", "DIR", "-F", "--sync-standbys", "1"], True),  # they share a standby's acknowledgement
])  # fmt: skip
def test_the_server_yields_between_turns_only_where_replies_share_a_batch_cost(
        flags: list[str], yields: bool, tmp_path: Path) -> None:  # fmt: skip
    cfg = parse_args([str(tmp_path) if f == "DIR" else f for f in flags])
    assert isinstance(cfg, Config)
    assert turn_yields(cfg) is yields


@pytest.mark.parametrize("cls", [Connection], ids=[IMPLEMENTATION])
def test_a_connection_tells_the_turns_of_each_read(cls: type[Connection]) -> None:
    async def main() -> list[int]:
        yielded: list[int] = []
        srv = Server(Config(), Engine())
        srv.turns = Turns(asyncio.get_running_loop().call_soon, yield_cpu=lambda: yielded.append(1))
        (a, _), (b, _) = _connect(srv, cls), _connect(srv, cls)
        a.data_received(b"list-tubes\r\n")
        b.data_received(b"list-tubes\r\n")
        await asyncio.sleep(0)  # the next loop turn
        return yielded

    assert asyncio.run(main()) == [1]
