"""IndexedHeap against a plain sorted reference: random push/pop/remove/update sequences keep
the minimum first and every item's ``hpos`` pointing at its slot."""

from __future__ import annotations

import random

from stalkd.engine.heap import IndexedHeap


class Item:
    __slots__ = ("hpos", "name")

    def __init__(self, name: int) -> None:
        self.hpos = -1
        self.name = name


def _check(h: IndexedHeap[Item], ref: dict[Item, int]) -> None:
    assert len(h) == len(ref)
    for i, it in enumerate(h._items):
        assert it.hpos == i
        assert h._keys[i] == ref[it]
        if i:
            assert h._keys[(i - 1) >> 1] <= h._keys[i]


def test_random_operations_match_reference() -> None:
    for seed in range(30):
        rnd = random.Random(seed)
        h: IndexedHeap[Item] = IndexedHeap()
        ref: dict[Item, int] = {}
        serial = 0
        for _ in range(400):
            op = rnd.random()
            if op < 0.45 or not ref:
                serial += 1
                it = Item(serial)
                key = rnd.randint(0, 50) << 20 | serial  # duplicates in the major part
                h.push(key, it)
                ref[it] = key
            elif op < 0.75:
                want = min(ref, key=ref.__getitem__)
                got = h.pop()
                assert got is want and got.hpos == -1
                del ref[got]
            elif op < 0.9:
                it = rnd.choice(list(ref))
                h.remove(it)
                assert it.hpos == -1
                del ref[it]
            else:
                it = rnd.choice(list(ref))
                key = rnd.randint(0, 50) << 20 | it.name
                h.update(it, key)
                ref[it] = key
            _check(h, ref)
        order = [h.pop() for _ in range(len(h))]
        assert order == sorted(ref, key=ref.__getitem__)
