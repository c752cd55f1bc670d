"""IndexedHeap against a plain sorted reference: random push/pop/remove/update sequences keep
the minimum first and every item's ``hpos`` pointing at its slot."""

from __future__ import annotations

import random

import pytest

from stalkd.engine.heap import HeapItem, IndexedHeap

# One implementation (compiled by Cython where built: stalkd.extensions); the tests keep their
# parameter so that a heap of another layout can be held to the same behaviour.
impls = pytest.mark.parametrize("impl", [IndexedHeap], ids=lambda c: c.__module__.rsplit(".", 1)[-1])


class Item(HeapItem):
    __slots__ = ("name",)

    def __init__(self, name: int) -> None:
        self.hpos = -1
        self.name = name


def _check(h: IndexedHeap, ref: dict[Item, int]) -> None:
    assert len(h) == len(ref)
    keys = h.key_list()
    for i, it in enumerate(h.item_list()):
        assert it.hpos == i
        assert keys[i] == ref[it]
        if i:
            assert keys[(i - 1) >> 1] <= keys[i]


@impls
def test_random_operations_match_reference(impl: type[IndexedHeap]) -> None:
    for seed in range(30):
        rnd = random.Random(seed)
        h: IndexedHeap = impl()
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


@impls
def test_load_keeps_a_list_already_in_heap_order(impl: type[IndexedHeap]) -> None:
    """A sorted list is a valid heap, and so is any heap array: load() keeps both as they are
    (recovery relies on it to skip reordering), and the result pops in key order."""
    rnd = random.Random(7)
    sorted_keys = sorted(rnd.sample(range(10**6), 500))
    donor: IndexedHeap = impl()
    for k in rnd.sample(range(10**6), 500):
        donor.push(k, Item(k))
    for keys in (sorted_keys, donor.key_list()):
        items = [Item(k) for k in keys]
        h: IndexedHeap = impl()
        h.load(list(keys), list(items))
        assert h.key_list() == keys and h.item_list() == items  # nothing moved
        _check(h, {it: it.name for it in items})
        assert [h.pop().name for _ in range(len(keys))] == sorted(keys)


@impls
def test_load_orders_a_list_that_is_not_a_heap(impl: type[IndexedHeap]) -> None:
    rnd = random.Random(8)
    keys = rnd.sample(range(10**6), 500)
    items = [Item(k) for k in keys]
    h: IndexedHeap = impl()
    h.load(list(keys), items)
    assert h.key_list() != keys
    _check(h, {it: it.name for it in items})
    assert [h.pop().name for _ in range(500)] == sorted(keys)
