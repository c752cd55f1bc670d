"""The examples in the engine's docstrings are true (every stalkd.engine module, run as doctests)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import stalkd.engine
from support import run_doctests

MODULES = sorted(m.name for m in pkgutil.iter_modules(stalkd.engine.__path__, "stalkd.engine."))


def test_every_module_is_found() -> None:
    assert {"stalkd.engine.engine", "stalkd.engine.snapshot", "stalkd.engine.tail"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = run_doctests(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
