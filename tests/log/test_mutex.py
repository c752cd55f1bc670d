"""The write path's lock (stalkd.log.mutex): what a threading.Lock promises, in both builds (a
compiled Mutex of C atomics and a condition variable, or a threading.Lock uncompiled)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from stalkd.log.mutex import new_mutex
from support import wait_until


@pytest.fixture
def quick_switches() -> Iterator[None]:
    """Threads switch every few microseconds, so contended paths are taken."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_a_taken_lock_refuses_a_try_and_a_timed_wait_and_release_frees_it() -> None:
    m = new_mutex()
    assert m.acquire() and m.locked()
    assert m.acquire(False) is False
    assert m.acquire(True, 0.001) is False
    m.release()
    assert not m.locked()
    assert m.acquire(True, 0.001) is True
    m.release()


def test_releasing_a_free_lock_is_refused() -> None:
    m = new_mutex()
    with pytest.raises(RuntimeError):
        m.release()
    with m:
        assert m.locked()
    with pytest.raises(RuntimeError):
        m.release()


def test_another_thread_releases_and_a_blocked_taker_wakes() -> None:
    m = new_mutex()
    m.acquire()
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(m.acquire()))
    t.start()
    try:
        assert not got  # blocked while the lock is held (it cannot have taken it)
        m.release()  # this thread releases what it took; the other wakes
        wait_until(lambda: got, "the blocked taker to wake")
        assert got == [True] and m.locked()
    finally:
        t.join(timeout=30)
    m.release()  # a lock one thread took, released by another (the group commit's wake-up)
    assert not m.locked()


@pytest.mark.usefixtures("quick_switches")
def test_contended_takers_exclude_each_other() -> None:
    m = new_mutex()
    state = {"n": 0, "inside": 0, "overlap": 0}

    def work() -> None:
        for _ in range(2000):
            m.acquire()
            try:
                state["inside"] += 1
                if state["inside"] != 1:
                    state["overlap"] += 1
                n = state["n"]
                state["n"] = n + 1
                state["inside"] -= 1
            finally:
                m.release()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert state == {"n": 8000, "inside": 0, "overlap": 0}


@pytest.mark.usefixtures("quick_switches")
def test_a_condition_over_it_waits_and_is_notified() -> None:
    m = new_mutex()
    cond = threading.Condition(m)  # type: ignore[arg-type]  # GroupCommit.cond is made so
    box: list[int] = []
    seen: list[int] = []

    def waiter() -> None:
        with cond:
            cond.wait_for(lambda: box, timeout=30)
            seen.extend(box)

    t = threading.Thread(target=waiter)
    t.start()
    with cond:
        box.append(7)
        cond.notify_all()
    t.join(timeout=30)
    assert seen == [7] and not m.locked()
