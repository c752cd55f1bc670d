"""The examples in the engine's docstrings are true (every stalkd.engine and stalkd.persist module,
run as doctests)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import stalkd.engine
import stalkd.persist
from support import run_doctests

MODULES = sorted(m.name for pkg in (stalkd.engine, stalkd.persist)
                 for m in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."))


def test_every_module_is_found() -> None:
    assert {"stalkd.engine.engine", "stalkd.persist.snapshot", "stalkd.persist.tail"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = run_doctests(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
