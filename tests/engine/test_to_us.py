"""engine/objects.to_us, the engine's seconds-to-microseconds conversion, against round()."""

from __future__ import annotations

import math
import random

import pytest

from stalkd.engine.objects import US, to_us


def test_to_us_rounds_as_round_does_ties_to_even_included() -> None:
    rng = random.Random(33)
    values = [rng.uniform(-2e9, 2e9) for _ in range(50_000)]
    values += [k / 2e6 for k in range(-2000, 2000)]  # every tie near zero, both signs
    values += [1.7e9 + k / 4e6 for k in range(-2000, 2000)]  # near today's clock, ties included
    values += [0.0, -0.0, 7, -7, 2**53 / US, -(2**53) / US, 2**60 / US, 1e300, -1e300, 10**20]
    for v in values:
        got = to_us(v)
        assert got == round(v * US) and type(got) is int, v


@pytest.mark.parametrize("v", [math.nan, math.inf, -math.inf])
def test_to_us_refuses_what_round_refuses(v: float) -> None:
    with pytest.raises((ValueError, OverflowError)):
        to_us(v)
