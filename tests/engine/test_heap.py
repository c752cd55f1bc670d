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


@impls
@pytest.mark.parametrize("case", ["ascending", "one-out-of-order", "interleaved", "few", "into-empty", "lists-longer"])
def test_add_many_keeps_the_heap_whichever_way_it_adds(impl: type[IndexedHeap], case: str) -> None:
    """add_many appends keys that keep the heap order in place (recovery's tail after a
    snapshot), pushes a few, rebuilds for many: every way ends with a valid heap whose items
    know their slots and that pops in key order."""
    rnd = random.Random(case)
    h: IndexedHeap = impl()
    ref: dict[Item, int] = {}
    old = [] if case == "into-empty" else sorted(rnd.sample(range(1000), 300))
    for k in old:
        it = Item(k)
        h.push(k, it)
        ref[it] = k
    if case == "lists-longer":  # popped items leave the lists longer than the heap
        for _ in range(100):
            del ref[h.pop()]
    new = {
        "ascending": list(range(1000, 1400)),
        "one-out-of-order": [*range(1000, 1200), -1, *range(1200, 1400)],
        "interleaved": rnd.sample(range(1000, 5000), 400),
        "few": [3, 2000],
        "into-empty": sorted(rnd.sample(range(1000), 200)),
        "lists-longer": list(range(1000, 1400)),
    }[case]
    items = [Item(k) for k in new]
    h.add_many(list(new), items)
    ref.update(zip(items, new, strict=True))
    _check(h, ref)
    assert [h.pop().name for _ in range(len(ref))] == sorted(ref.values())


@impls
def test_add_many_refuses_unmatched_lists_before_changing_anything(impl: type[IndexedHeap]) -> None:
    h: IndexedHeap = impl()
    a = Item(1)
    h.push(1, a)
    with pytest.raises(ValueError, match="2 keys for 1 items"):
        h.add_many([2, 3], [Item(2)])
    assert h.key_list() == [1] and h.item_list() == [a]


@impls
def test_keys_of_every_size_and_sign_pop_in_order(impl: type[IndexedHeap]) -> None:
    # compiled, non-negative ints are compared digit by digit (heap.pxd's _lt) and anything
    # else through Python's comparison: keys that differ only in a low digit, in the top one,
    # in their number of digits, equal ones, zero, negatives and floats pop in sorted order
    rng = random.Random(7)
    keys = [0, 1, -1, -(1 << 70), 2.5, -0.5, (1 << 64) | 5, (1 << 64) | 4, (7 << 64) | 5,
            (1 << 95) + 1, 1 << 95, 1 << 30, (1 << 30) - 1, 1 << 60, 1 << 90, 3, 3, 1 << 200]
    keys += [rng.randrange(1 << 96) for _ in range(200)] + [rng.randrange(1 << 32) << 64 for _ in range(50)]
    rng.shuffle(keys)
    h = impl()
    ref: dict[Item, int] = {}
    for n, k in enumerate(keys):
        it = Item(n)
        h.push(k, it)  # type: ignore[arg-type]  # (floats too: any ordered key)
        ref[it] = k  # type: ignore[assignment]
    _check(h, ref)
    out = []
    while h:
        out.append(ref[h.pop()])
    assert out == sorted(keys)
