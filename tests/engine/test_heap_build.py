"""Which IndexedHeap and which Engine.apply the engine runs: the compiled ones when they are
built and not disabled, the references under ``STALKD_NO_EXTENSIONS=1`` or without a build."""

from __future__ import annotations

import importlib.util
import os

import pytest

from stalkd.engine import Engine, fastengine, fastheap, heap
from stalkd.engine.objects import ConnState, Tube

_DISABLED = os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")
_BUILT = importlib.util.find_spec("stalkd.engine._heap") is not None
_ENGINE_BUILT = importlib.util.find_spec("stalkd.engine._engine") is not None


def test_the_active_heap_follows_the_build_and_the_switch() -> None:
    expected = "c" if _BUILT and not _DISABLED else "python"
    assert expected == fastheap.IMPLEMENTATION
    assert (fastheap.IndexedHeap is heap.IndexedHeap) == (expected == "python")


def test_the_engine_holds_its_jobs_in_the_active_heap() -> None:
    t = Tube("default", 1)
    assert type(t.ready) is type(t.delayed) is type(ConnState(1, t).reserved) is fastheap.IndexedHeap


def test_the_engine_runs_the_compiled_apply_when_built_and_not_disabled() -> None:
    expected = "c" if _BUILT and _ENGINE_BUILT and not _DISABLED else "python"
    assert expected == fastengine.IMPLEMENTATION
    assert (type(Engine.__dict__["apply"]).__name__ == "FastMethod") == (expected == "c")


def test_a_module_that_does_not_match_the_classes_falls_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Stale:
        """What an editable install left behind after a change to a class's slots."""

        @staticmethod
        def configure(config: object) -> None:
            raise TypeError("Job has slots the compiled engine does not know")

    monkeypatch.setattr(fastengine, "_module", lambda: Stale)
    monkeypatch.setattr(fastengine, "IMPLEMENTATION", fastengine.IMPLEMENTATION)

    def apply() -> None: ...

    with pytest.warns(RuntimeWarning, match="make ext"):
        assert fastengine.accelerated(Engine, apply) is apply
    assert fastengine.IMPLEMENTATION == "python"
