"""The group-commit batch gate (compiled by Cython, or its .py file under STALKD_NO_EXTENSIONS=1):
every waiter returns True once opened, ``hand`` releases exactly one waiter (False) and keeps
the rest blocked."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from stalkd.log import gate

IMPLS: list[object] = [gate.Gate]


def poll(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Wait for ``cond`` with a deadline (True once it holds)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def waiters(g: gate.Gate, n: int) -> tuple[list[threading.Thread], list[bool]]:
    got: list[bool] = []
    lock = threading.Lock()

    def run() -> None:
        r = g.wait()
        with lock:
            got.append(r)

    ts = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for t in ts:
        t.start()
    return ts, got


@pytest.mark.parametrize("make", IMPLS, ids=lambda m: getattr(m, "__module__", "?"))
def test_opened_before_waiting_lets_every_waiter_through(make: Callable[[], gate.Gate]) -> None:
    g = make()
    assert not g.done
    g.open()
    assert g.done
    assert [g.wait() for _ in range(3)] == [True, True, True]


@pytest.mark.parametrize("make", IMPLS, ids=lambda m: getattr(m, "__module__", "?"))
def test_open_wakes_every_waiter_one_passing_to_the_next(make: Callable[[], gate.Gate]) -> None:
    g = make()
    ts, got = waiters(g, 8)
    assert not poll(lambda: len(got) > 0, timeout=0.05)  # nobody passes a closed gate
    g.open()
    for t in ts:
        t.join(30)
    assert got == [True] * 8


@pytest.mark.parametrize("make", IMPLS, ids=lambda m: getattr(m, "__module__", "?"))
def test_hand_releases_exactly_one_waiter_to_lead(make: Callable[[], gate.Gate]) -> None:
    g = make()
    ts, got = waiters(g, 4)
    g.hand()
    assert poll(lambda: len(got) == 1)
    assert got == [False] and not g.done
    assert not poll(lambda: len(got) > 1, timeout=0.05)  # the others stay blocked
    g.open()  # the one that led resolves the batch
    for t in ts:
        t.join(30)
    assert got == [False, True, True, True]


@pytest.mark.parametrize("make", IMPLS, ids=lambda m: getattr(m, "__module__", "?"))
def test_a_timed_wait_returns_none_when_the_time_runs_out_having_taken_nothing(make: Callable[[], gate.Gate]) -> None:
    g = make()
    assert g.wait(0.01) is None
    assert g.wait(0) is None and g.wait(-1) is None and g.wait(float("nan")) is None
    g.hand()
    assert g.wait(0.01) is False  # the hand is still there for one waiter
    assert g.wait(0.01) is None
    g.open()
    assert g.wait(1e300) is True and g.wait(30) is True  # passed on: still open


@pytest.mark.parametrize("make", IMPLS, ids=lambda m: getattr(m, "__module__", "?"))
def test_a_timed_waiter_is_woken_by_open(make: Callable[[], gate.Gate]) -> None:
    g = make()
    got: list[bool | None] = []
    t = threading.Thread(target=lambda: got.append(g.wait(600)), daemon=True)
    t.start()
    g.open()
    t.join(30)
    assert got == [True]


def test_a_gate_takes_no_arguments() -> None:
    with pytest.raises(TypeError):
        gate.Gate(1)  # type: ignore[call-arg]
