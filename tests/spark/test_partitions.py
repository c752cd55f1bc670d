"""Planning a log read into partitions: slices cover the range once, groups are consecutive,
balanced and never empty. Pure: no Spark session, no log."""

from __future__ import annotations

import random

import pytest

from stalkd.spark.partitions import LogSlice, Segment, group, plan


def _segments(sizes: list[int], active: bool) -> list[Segment]:
    segs, base = [], 0
    for i, n in enumerate(sizes):
        last = i == len(sizes) - 1
        segs.append(Segment(f"s{i}", base, None if active and last else base + n))
        base += n
    return segs


def _offsets(slices: list[LogSlice], active_end: int) -> list[int]:
    return [o for s in slices for o in range(s.start, active_end if s.end is None else s.end)]


@pytest.mark.parametrize("seed", range(40))
def test_groups_are_the_slices_in_order_and_balanced(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.randint(1, 50) for _ in range(rng.randint(1, 30))]
    total = sum(sizes)
    start, end = rng.randint(0, total // 3), rng.choice([None, rng.randint(total // 2, total)])
    cap = rng.choice([7, 40, 10_000])
    slices = plan(_segments(sizes, active=end is None), start, end, cap)
    assert _offsets(slices, total) == list(range(start, total if end is None else end))
    target = rng.randint(1, 8)
    groups = group(slices, target=target, cap=cap)
    assert [s for g in groups for s in g.slices] == slices
    assert all(g.slices for g in groups) and len(groups) <= len(slices)
    if not slices:
        return
    # Each group's count is within one slice of the ideal share (the active slice is a guess).
    if end is not None:
        share = sum(s.end - s.start for s in slices) / len(groups)  # type: ignore[operator]
        biggest = max(s.end - s.start for s in slices)  # type: ignore[operator]
        for g in groups:
            assert abs(sum(s.end - s.start for s in g.slices) - share) <= biggest  # type: ignore[operator]
    # At least min(slices, target) groups, and enough groups to respect the cap roughly.
    assert len(groups) >= min(len(slices), target)


def test_one_partition_per_core_for_the_bench_layout() -> None:
    """Five full 16 MiB segments and a nearly full active one on two cores: 3 + 3 segments."""
    segs = _segments([169_419, 169_686, 169_799, 169_671, 169_961, 151_464], active=True)
    groups = group(plan(segs, 0, None, 1_000_000), target=2, cap=1_000_000)
    assert [len(g.slices) for g in groups] == [3, 3]
    # A big log is not squeezed into two partitions: the cap adds more.
    many = _segments([170_000] * 60, active=False)
    assert len(group(plan(many, 0, None, 1_000_000), target=2, cap=1_000_000)) == 11
