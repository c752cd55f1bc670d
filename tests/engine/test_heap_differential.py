"""The compiled IndexedHeap (stalkd.engine._heap) against the reference (engine/heap.py): the same
operation sequences must return the same items and keys and leave the same arrays and ``hpos``
values after every step. Skipped when the extension is not active (``STALKD_NO_EXTENSIONS=1``
or no compiler); test_heap_build.py checks it is active when it should be.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stalkd.engine import fastheap
from stalkd.engine.heap import IndexedHeap as PyHeap

pytestmark = pytest.mark.skipif(fastheap.IMPLEMENTATION != "c", reason="the compiled heap is not active")

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Slotted:
    """Like the engine's Job: ``hpos`` is a slot (the compiled heap writes it directly)."""

    __slots__ = ("hpos", "name")

    def __init__(self, name: int) -> None:
        self.hpos = -1
        self.name = name


class Plain:
    """``hpos`` in the instance dict (the compiled heap falls back to setattr)."""

    def __init__(self, name: int) -> None:
        self.hpos = -1
        self.name = name


# Keys as the engine packs them (major << 64 | minor, majors up to a deadline in microseconds),
# small ones, and negative ones; the minor part numbers the item, so keys are unique.
_major = st.one_of(st.integers(0, 6), st.integers(0, 2**53), st.integers(-(2**40), 2**40))
_op = st.one_of(
    st.tuples(st.just("push"), _major),
    st.tuples(st.just("pop"), st.none()),
    st.tuples(st.just("remove"), st.integers(0, 10**6)),
    st.tuples(st.just("update"), st.tuples(st.integers(0, 10**6), _major)),
    st.tuples(st.just("peek"), st.none()),
    st.tuples(st.just("key_of"), st.integers(0, 10**6)),
    st.tuples(st.just("add_many"), st.lists(_major, max_size=40)),
    st.tuples(st.just("sorted"), st.none()),
    st.tuples(st.just("due"), _major),
)


def _state(h: Any) -> tuple[list[int], list[int], list[int]]:
    items = h.item_list()
    return h.key_list(), [it.name for it in items], [it.hpos for it in items]


def _names(x: Any) -> Any:
    return [it.name for it in x] if isinstance(x, list) else getattr(x, "name", x)


def _run(ops: list[tuple[str, Any]], cls: type, load: list[int] | None, every: int = 1) -> None:
    """Both heaps through ``ops``; their states compared after every ``every``-th step."""
    py: PyHeap[Any] = PyHeap()
    c: PyHeap[Any] = fastheap.IndexedHeap()
    py_items: dict[int, Any] = {}
    c_items: dict[int, Any] = {}
    serial = 0

    def new(major: int) -> tuple[int, Any, Any]:
        nonlocal serial
        serial += 1
        a, b = cls(serial), cls(serial)
        py_items[serial], c_items[serial] = a, b
        return major << 64 | serial, a, b

    if load is not None:
        made = [new(m) for m in load]
        py.load([k for k, _, _ in made], [a for _, a, _ in made])
        c.load([k for k, _, _ in made], [b for _, _, b in made])
        assert _state(c) == _state(py)
    live: list[int] = []
    for step, (op, arg) in enumerate(ops):
        if op in ("remove", "key_of", "update"):
            live = sorted(it.name for it in py.item_list())
        if op == "push":
            k, a, b = new(arg)
            py.push(k, a)
            c.push(k, b)
        elif op == "pop":
            if not py:
                with pytest.raises(IndexError):
                    c.pop()
                continue
            assert c.pop().name == py.pop().name
        elif op in ("remove", "key_of", "update"):
            pick = arg[0] if op == "update" else arg
            if not live:
                stranger = cls(0)
                with pytest.raises(ValueError):
                    c.remove(stranger)
                continue
            name = live[pick % len(live)]
            if op == "remove":
                py.remove(py_items[name])
                c.remove(c_items[name])
                assert c_items[name].hpos == py_items[name].hpos == -1
                with pytest.raises(ValueError):
                    c.remove(c_items[name])
            elif op == "key_of":
                assert c.key_of(c_items[name]) == py.key_of(py_items[name])
            else:
                key = arg[1] << 64 | name
                py.update(py_items[name], key)
                c.update(c_items[name], key)
        elif op == "peek":
            assert _names(c.peek()) == _names(py.peek())
            assert c.peek_key() == py.peek_key()
        elif op == "add_many":
            made = [new(m) for m in arg]
            py.add_many([k for k, _, _ in made], [a for _, a, _ in made])
            c.add_many([k for k, _, _ in made], [b for _, _, b in made])
        elif op == "due":
            top = py.peek_key()
            for now in (arg, arg - 1, arg + 1) + (() if top is None else (top >> 64, (top >> 64) - 1)):
                assert c.due(now) == py.due(now)
        else:
            assert _names(c.sorted_items()) == _names(py.sorted_items())
        if step % every == 0:
            assert _state(c) == _state(py)
            assert [it.name for it in c] == [it.name for it in py]
        assert len(c) == len(py) and bool(c) == bool(py)
    assert _state(c) == _state(py)
    out_py: list[Any] = []
    out_c: list[Any] = []
    py.append_items_to(out_py)
    c.append_items_to(out_c)
    assert _names(out_c) == _names(out_py)
    while py:
        assert c.pop().name == py.pop().name
    assert not c


@SETTINGS
@given(st.lists(_op, max_size=120), st.sampled_from([Slotted, Plain]))
def test_same_operations_same_heaps(ops: list[tuple[str, Any]], cls: type) -> None:
    _run(ops, cls, None)


@SETTINGS
@given(st.one_of(st.lists(_major, max_size=60), st.lists(_major, max_size=60).map(sorted)),
       st.lists(_op, max_size=40))
def test_load_then_operations(load: list[int], ops: list[tuple[str, Any]]) -> None:
    """load() keeps a list already in heap order (a sorted one here) and otherwise orders it as
    heapq.heapify orders the keys, in both."""
    _run(ops, Slotted, load)


def test_a_deep_heap_pops_in_key_order_as_the_reference() -> None:
    """Thousands of jobs in one ready heap (what a reserve pops) with deletes in the middle."""
    ops: list[tuple[str, Any]] = [("push", (i * 7919) % 5000) for i in range(5000)]
    ops += [("remove", i * 31) for i in range(300)] + [("pop", None)] * 500
    _run(ops, Slotted, None, every=97)


def test_errors_match_the_reference() -> None:
    c: PyHeap[Any] = fastheap.IndexedHeap()
    with pytest.raises(TypeError):
        c.push("1", Slotted(1))  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        c.push(1 << 130, Slotted(1))
    assert not c
    c.push(1, Slotted(1))
    with pytest.raises(ValueError, match="empty heap"):
        c.load([2], [Slotted(2)])
    fresh: PyHeap[Any] = fastheap.IndexedHeap()
    with pytest.raises(ValueError, match="1 keys for 2 items"):
        fresh.load([1], [Slotted(1), Slotted(2)])
    with pytest.raises(ValueError, match="unique keys"):
        fresh.load([3, 3, 1], [Slotted(1), Slotted(2), Slotted(3)])
    assert not fresh
