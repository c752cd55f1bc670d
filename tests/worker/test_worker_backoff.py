"""compute_backoff: the retry schedule as a pure function."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalkd.worker.backoff import Backoff, compute_backoff


def test_schedule_without_jitter_doubles_up_to_the_cap() -> None:
    # Given no jitter, When attempts 1..8 fail, Then delays double from base until max_delay.
    delays = [compute_backoff(n, base=2, max_delay=60, jitter=0) for n in range(1, 9)]
    assert delays == [2, 4, 8, 16, 32, 60, 60, 60]


def test_full_jitter_spans_zero_to_the_cap() -> None:
    assert compute_backoff(4, base=1, jitter=1.0, rand=0.0) == 0
    assert compute_backoff(4, base=1, jitter=1.0, rand=0.999) == 8
    # Half jitter keeps at least half the cap.
    assert compute_backoff(4, base=1, jitter=0.5, rand=0.0) == 4


def test_huge_attempt_numbers_do_not_overflow() -> None:
    assert compute_backoff(100_000, base=1, max_delay=600, jitter=0) == 600


@pytest.mark.parametrize("kwargs", [{"attempt": 0}, {"attempt": 1, "jitter": 1.5},
                                    {"attempt": 1, "factor": 0.5}, {"attempt": 1, "rand": 1.0}])
def test_bad_arguments_are_refused(kwargs: dict[str, float]) -> None:
    attempt = int(kwargs.pop("attempt"))
    with pytest.raises(ValueError):
        compute_backoff(attempt, **kwargs)  # type: ignore[arg-type]


@given(attempt=st.integers(1, 10_000), base=st.floats(0, 100), factor=st.floats(1, 10),
       max_delay=st.floats(0, 10_000), jitter=st.floats(0, 1), rand=st.floats(0, 0.999999))
def test_delay_is_always_within_zero_and_the_cap(attempt: int, base: float, factor: float,
                                                 max_delay: float, jitter: float, rand: float) -> None:
    d = compute_backoff(attempt, base=base, factor=factor, max_delay=max_delay, jitter=jitter,
                        rand=rand)
    assert 0 <= d <= round(max_delay) + 1


def test_backoff_value_matches_the_function() -> None:
    b = Backoff(base=3, factor=3, max_delay=100, jitter=0)
    assert [b.delay(n) for n in (1, 2, 3, 4, 5)] == [3, 9, 27, 81, 100]
