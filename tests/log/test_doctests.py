"""The examples in the log's docstrings are true (every stalkd.log module, run as doctests)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import stalkd.log
from support import run_doctests

MODULES = ["stalkd.log"] + sorted(m.name for m in pkgutil.iter_modules(stalkd.log.__path__, "stalkd.log."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = run_doctests(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
