"""A standby's collector (``GcPolicy`` with ``young_only``): while the server follows a primary,
only the youngest generation is collected automatically (the jobs it applies are not walked a
second time by middle collections), cycles are still freed by the young collections and by the
timed full one, and once promoted the next full collection brings the middle ones back."""

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
def collections() -> Iterator[list[int]]:
    """The generation of each automatic or explicit collection while the test runs."""
    seen: list[int] = []

    def cb(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(cb)
    try:
        yield seen
    finally:
        gc.callbacks.remove(cb)


def test_a_standby_collects_only_young_objects_until_promoted(collections: list[int]) -> None:
    before = gc.get_threshold()
    standby = [True]
    policy = GcPolicy(full_every=60.0, now=0.0, young_only=lambda: standby[0])
    policy.start()
    try:
        # Given a cycle made old (it survived a young collection) that then becomes garbage
        a, b = Node(), Node()
        a.other, b.other = b, a
        gc.collect(0)
        old = weakref.ref(a)
        del a, b
        collections.clear()
        # When the heap grows (default thresholds: a middle collection every 10 young ones)
        kept = [Node() for _ in range(100_000)]
        # Then only young collections ran, and the old cycle waits
        assert collections and set(collections) == {0}
        assert old() is not None
        # and a young cycle is freed by them
        c, d = Node(), Node()
        c.other, d.other = d, c
        young = weakref.ref(c)
        del c, d
        kept += [Node() for _ in range(5_000)]
        assert young() is None
        # When promoted, then the timer is due: the full collection frees the old cycle, and
        # middle collections run again
        standby[0] = False
        assert policy.tick(60.0) == 120.0
        assert old() is None
        collections.clear()
        kept += [Node() for _ in range(100_000)]
        assert 1 in collections and 2 not in collections
        del kept
    finally:
        policy.stop()
    assert gc.get_threshold() == before


def test_a_primary_keeps_its_middle_collections() -> None:
    before = gc.get_threshold()
    policy = GcPolicy(full_every=60.0, now=0.0, young_only=lambda: False)
    policy.start()
    try:
        assert gc.get_threshold()[:2] == before[:2]
    finally:
        policy.stop()
    assert gc.get_threshold() == before
