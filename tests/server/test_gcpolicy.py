"""GcPolicy with the real collector: no automatic full collection while the heap grows, a full
one when the timer says, cycles freed by it, thresholds restored on stop."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from stalkd.server.gcpolicy import GcPolicy


class Node:
    def __init__(self) -> None:
        self.other: object = None


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """Counts collections of the oldest generation while the test runs."""
    seen: list[int] = []

    def cb(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(cb)
    try:
        yield seen
    finally:
        gc.callbacks.remove(cb)


def test_a_growing_heap_triggers_no_full_collection_until_the_timer(full_collections: list[int]) -> None:
    before = gc.get_threshold()
    policy = GcPolicy(full_every=60.0, now=0.0)
    policy.start()
    try:
        # Given a cycle that becomes garbage once it is old (survived young collections)
        a, b = Node(), Node()
        a.other, b.other = b, a
        gc.collect(1)
        gc.collect(1)
        probe = weakref.ref(a)
        del a, b
        # When the heap grows a lot (the default thresholds would run several full collections)
        kept = [Node() for _ in range(300_000)]
        # Then no full collection ran, and the old cycle is still there
        assert full_collections == []
        assert probe() is not None
        # When the timer is due
        assert policy.tick(30.0) == 60.0  # not yet
        assert policy.tick(60.0) == 120.0
        # Then one full collection ran and freed the cycle
        assert len(full_collections) == 1
        assert policy.full_collections == 1
        assert probe() is None
        del kept
    finally:
        policy.stop()
    assert gc.get_threshold() == before


def test_bad_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="full_every"):
        GcPolicy(full_every=0.0, now=0.0)
