"""The memory budget's rules (server/budget.py), on stand-in connections: no socket, no clock."""

from __future__ import annotations

import doctest

import stalkd.server.budget as budget_module
from stalkd.server.budget import MemoryBudget, default_limit
from support import run_doctests  # tests/support.py

MB = 2**20


class Conn:
    """What the budget sees of a connection: it records what the budget told it."""

    def __init__(self, cid: int, inp: int = 0, out: int = 0) -> None:
        self.id, self.peer, self.charged = cid, f"peer{cid}", 0
        self.inp, self.out = inp, out
        self.reading = True
        self.closed: str | None = None
        self.budget: MemoryBudget | None = None

    def measure_memory(self) -> None:
        assert self.budget is not None
        self.budget.charge(self, self.inp, self.out)

    def hold_reading(self, on: bool) -> None:
        self.reading = not on

    def shed(self, why: str) -> None:
        self.closed = why


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _budget(limit: int = 10 * MB) -> tuple[MemoryBudget, Clock]:
    clock = Clock()
    return MemoryBudget(limit, grain=64 * 1024, grace=2.0, clock=clock), clock


def _conns(b: MemoryBudget, *figures: tuple[int, int]) -> list[Conn]:
    out = []
    for i, (inp, out_bytes) in enumerate(figures, 1):
        c = Conn(i, inp, out_bytes)
        c.budget = b
        c.measure_memory()
        out.append(c)
    return out


def test_small_holders_are_not_tracked() -> None:
    b, _ = _budget()
    (c,) = _conns(b, (1000, 2000))
    assert b.used == 0 and c.charged == 0 and not b.tracked


def test_under_the_limit_everyone_reads() -> None:
    b, _ = _budget()
    cs = _conns(b, (2 * MB, 0), (0, 3 * MB), (MB, MB))
    assert b.used == 7 * MB
    assert all(c.reading for c in cs)


def test_past_the_limit_the_large_stop_reading_but_the_one_with_most_input_runs() -> None:
    b, _ = _budget()
    small = Conn(99, 1000, 0)
    small.budget = b
    small.measure_memory()
    readers = _conns(b, (0, 4 * MB), (0, 4 * MB))
    body_a, body_b = Conn(10, 2 * MB, 0), Conn(11, 3 * MB, 0)
    for c in (body_a, body_b):
        c.budget = b
        c.measure_memory()
    assert b.used == 13 * MB
    assert [c.reading for c in readers] == [False, False]
    assert b.runner is body_b and body_b.reading and not body_a.reading
    assert small.reading  # the innocent, small, keeps being served
    # When the runner's body is in (its input parsed), the next largest input runs
    body_b.inp = 0
    body_b.measure_memory()
    assert b.runner is body_a and body_a.reading
    assert body_b.reading  # it holds nothing now


def test_commands_left_to_run_make_no_runner() -> None:
    b, _ = _budget()
    # Given readers that leave their replies unread, each with a few commands left to run
    readers = _conns(b, *[(1000, 3 * MB)] * 4)
    # Then past the limit none of them runs on: running them would only add replies
    assert b.over_since is not None and b.runner is None
    assert not any(c.reading for c in readers)
    # and one whose input is done lets nobody else run either
    readers[0].inp = 0
    readers[0].measure_memory()
    assert b.runner is None and not any(c.reading for c in readers[1:])
    # while a body in flight (input of a grain or more) does run
    body = Conn(9, 64 * 1024, 0)
    body.budget = b
    body.measure_memory()
    assert b.runner is body and body.reading
    # and once it is in, nobody runs on in its place
    body.inp = 100
    body.out = 64 * 1024
    body.measure_memory()
    assert b.runner is None and not body.reading


def test_reading_resumes_for_all_under_three_quarters() -> None:
    b, _ = _budget()
    cs = _conns(b, (0, 4 * MB), (0, 4 * MB), (0, 4 * MB))
    assert not any(c.reading for c in cs)
    cs[0].out = 0
    cs[0].measure_memory()  # 8 MiB: still past three quarters of 10
    assert not cs[1].reading
    b.forget(cs[1])  # 4 MiB
    assert all(c.reading for c in (cs[0], cs[2]))
    assert b.used == 4 * MB and b.over_since is None


def test_the_largest_is_closed_after_the_grace_and_nobody_smaller() -> None:
    b, clock = _budget()
    cs = _conns(b, (0, 3 * MB), (0, 5 * MB), (0, 4 * MB))
    b.tick()
    assert all(c.closed is None for c in cs)  # within the grace
    clock.now = 2.5
    b.tick()
    assert cs[1].closed is not None and "5.0 MiB" in cs[1].closed
    assert cs[0].closed is None and cs[2].closed is None
    assert b.closed == 1 and b.used == 7 * MB
    b.tick()  # under the limit now: nobody else
    assert cs[0].closed is None and cs[2].closed is None


def test_tick_sees_replies_a_client_read() -> None:
    b, _ = _budget()
    (c,) = _conns(b, (0, 4 * MB))
    c.out = 1000
    b.tick()
    assert b.used == 0 and not b.active()


def test_peak_is_kept_until_taken() -> None:
    b, _ = _budget()
    (c,) = _conns(b, (0, 4 * MB))
    b.forget(c)
    assert b.take_peak() == 4 * MB and b.take_peak() == 0


def test_default_limit_has_room_for_two_of_the_largest_jobs() -> None:
    assert 32 * MB <= default_limit() <= 512 * MB
    assert default_limit(1 << 30) >= 2 << 30


def test_doctests() -> None:
    assert run_doctests(budget_module, optionflags=doctest.ELLIPSIS).failed == 0
