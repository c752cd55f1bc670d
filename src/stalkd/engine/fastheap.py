"""Which ``IndexedHeap`` holds the engine's jobs: the compiled one or the reference.

``stalkd.engine._heap`` (built from ``_heap.c`` with the protocol accelerator, ``make ext``) is a
compiled twin of ``heap.IndexedHeap``: the same operations leave the same arrays and ``hpos``
values (tests/engine/test_heap_differential.py). A reserve pops a ready heap of many jobs, which
in Python costs an interpreted loop iteration per level. ``STALKD_NO_EXTENSIONS=1`` or a missing
build selects the reference. Type checkers see the reference class, whose interface both share.

Example:
    >>> IMPLEMENTATION in ("c", "python")
    True
    >>> class J:
    ...     hpos = -1
    >>> h = IndexedHeap(); a = J(); h.push(pack(1, 2), a); (h.pop() is a, a.hpos)
    (True, -1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from stalkd.engine import heap
from stalkd.engine.heap import pack
from stalkd.extensions import compiled_module

__all__ = ["IMPLEMENTATION", "IndexedHeap", "PyIndexedHeap", "pack"]

PyIndexedHeap = heap.IndexedHeap


def _compiled() -> type | None:
    mod = compiled_module("stalkd.engine._heap")
    return None if mod is None else mod.IndexedHeap


if TYPE_CHECKING:
    IndexedHeap = heap.IndexedHeap
else:
    IndexedHeap = _compiled() or heap.IndexedHeap

IMPLEMENTATION: Literal["c", "python"] = "python" if IndexedHeap is PyIndexedHeap else "c"
