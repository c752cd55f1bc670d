"""Which IndexedHeap the engine runs: the compiled one when it is built and not disabled, the
reference under ``STALKD_NO_EXTENSIONS=1`` or without a build."""

from __future__ import annotations

import importlib.util
import os

from stalkd.engine import fastheap, heap
from stalkd.engine.objects import ConnState, Tube

_DISABLED = os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")
_BUILT = importlib.util.find_spec("stalkd.engine._heap") is not None


def test_the_active_heap_follows_the_build_and_the_switch() -> None:
    expected = "c" if _BUILT and not _DISABLED else "python"
    assert expected == fastheap.IMPLEMENTATION
    assert (fastheap.IndexedHeap is heap.IndexedHeap) == (expected == "python")


def test_the_engine_holds_its_jobs_in_the_active_heap() -> None:
    t = Tube("default", 1)
    assert type(t.ready) is type(t.delayed) is type(ConnState(1, t).reserved) is fastheap.IndexedHeap
