"""memtrim's trims run on a thread of their own, off the event loop (glibc only)."""

from __future__ import annotations

import threading

import pytest

from stalkd.server import memtrim

pytestmark = pytest.mark.skipif(memtrim.libc() is None, reason="not glibc (or older than 2.33)")


def test_a_trim_worth_doing_runs_on_a_thread_of_its_own() -> None:
    t = memtrim.Trimmer(threshold=0)  # any free heap is worth a trim
    seen: list[str] = []
    trim = t.trim

    def on_which_thread() -> bool:
        seen.append(threading.current_thread().name)
        return trim()

    t.trim = on_which_thread  # type: ignore[method-assign]
    assert t.tick()
    t.join()
    assert seen == ["stalkd-memtrim"] and t.trims == 1


def test_nothing_worth_giving_back_is_not_trimmed() -> None:
    t = memtrim.Trimmer(threshold=2**62)
    assert t.tick()
    t.join()
    assert t.trims == 0


def test_a_trim_counts_what_was_freed_since_the_last_one() -> None:
    figures = iter([40, 40, 40, 35, 44, 44])  # MiB free at each look (and after each trim)
    t = memtrim.Trimmer(threshold=8 * 2**20, free=lambda: next(figures) * 2**20)
    # Given 40 MiB free after a flood, it is given back
    assert t.trim() and t.trims == 1
    # and pages given back stay counted as free: nothing more to give back, no second trim
    assert not t.trim()
    # When part is used again (35) then 9 MiB more is freed, that is worth a trim again
    assert not t.trim() and t.trim() and t.trims == 2
