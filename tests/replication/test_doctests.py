"""The examples in the replication package's docstrings (and engine/handover.py's) are true."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import stalkd.replication
from support import run_doctests

MODULES = sorted(m.name for m in pkgutil.iter_modules(stalkd.replication.__path__, "stalkd.replication."))
MODULES.append("stalkd.engine.handover")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = run_doctests(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
