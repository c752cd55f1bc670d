"""The examples in the client's docstrings are true (run as doctests)."""

from __future__ import annotations

import importlib

import pytest

from support import run_doctests

MODULES = ["_address", "_core", "_failover", "_format", "_idle", "_primary", "_requests", "_tls", "_wire", "_yaml",
           "errors", "job", "options"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"stalkd.client.{name}")
    result = run_doctests(module)
    assert result.attempted > 0 and result.failed == 0
