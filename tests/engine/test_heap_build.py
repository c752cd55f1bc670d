"""The engine is one implementation: its modules run compiled by Cython when built and not
disabled, their ``.py`` files otherwise, and either way jobs, tubes and connections are the
heap items its heaps hold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stalkd.engine import Engine, heap, objects
from stalkd.engine.heap import HeapItem, IndexedHeap
from stalkd.engine.objects import ConnState, Job, Tube
from stalkd.extensions import CYTHON_MODULES, compiled_modules, source_path
from stalkd.protocol.commands import Put, Reserve

ROOT = Path(__file__).resolve().parents[2]
_DISABLED = os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")
ENGINE_MODULES = [m for m in CYTHON_MODULES if m.startswith("stalkd.engine.")]


def _built(module: str) -> bool:
    source = ROOT / source_path(module)
    return any(source.parent.glob(source.stem + ".*.so"))


@pytest.mark.parametrize("module", ENGINE_MODULES)
def test_each_engine_module_runs_compiled_when_built_and_not_disabled(module: str) -> None:
    assert compiled_modules()[module] == (_built(module) and not _DISABLED)


def test_the_engine_holds_its_jobs_tubes_and_connections_as_heap_items() -> None:
    t = Tube("default", 1)
    c = ConnState(1, t)
    assert type(t.ready) is type(t.delayed) is type(c.reserved) is IndexedHeap
    j = Job(1, t, 0, 0, 60, b"x", objects.JobState.READY, 0)
    assert all(isinstance(x, HeapItem) and x.hpos == -1 for x in (t, c, j))


def test_a_heap_refuses_an_item_without_its_slot_when_compiled() -> None:
    # Compiled, hpos is a C field of HeapItem, so anything else is refused; uncompiled, an
    # object with an ``hpos`` attribute works as well (duck typing), which nothing relies on.
    class NotAnItem:
        hpos = -1

    h: IndexedHeap = IndexedHeap()
    if compiled_modules()["stalkd.engine.heap"]:
        with pytest.raises(TypeError):
            h.push(1, NotAnItem())  # type: ignore[arg-type]
        assert len(h) == 0  # refused before anything moved
    else:
        h.push(1, NotAnItem())  # type: ignore[arg-type]
        assert heap.IndexedHeap is IndexedHeap


def test_a_put_and_a_reserve_move_the_job_between_heaps() -> None:
    e = Engine()
    e.connect(1, 0.0)
    e.apply(1, Put(0, 0, 60, b"x"), 0.0)
    j = e.jobs[1]
    assert j.hpos == 0 and e.tubes["default"].ready.peek() is j
    e.apply(1, Reserve(), 0.0)
    assert e.conns[1].reserved.peek() is j and len(e.tubes["default"].ready) == 0
