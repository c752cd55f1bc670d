"""The examples in the protocol modules' docstrings are executed, so they stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

from support import run_doctests

MODULES = ["stalkd.protocol", "stalkd.protocol.grammar", "stalkd.protocol.parser",
           "stalkd.protocol.lines", "stalkd.protocol.constructors", "stalkd.protocol.accel",
           "stalkd.protocol.replies", "stalkd.protocol.stats", "stalkd.protocol.markers"]  # fmt: skip


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = run_doctests(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
