"""The examples in the ha package's docstrings are true (every stalkd.ha module, as doctests)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import stalkd.ha
from support import run_doctests

MODULES = ["stalkd.ha"] + sorted(m.name for m in pkgutil.iter_modules(stalkd.ha.__path__, "stalkd.ha."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = run_doctests(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
