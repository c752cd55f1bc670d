"""The examples in the archive package's docstrings are true (none of them reaches a network)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import stalkd.archive
from support import run_doctests

# remote.py's example needs an S3 server, so it is written as a comment.
NO_EXAMPLES = {"stalkd.archive.remote"}
MODULES = sorted(m.name for m in pkgutil.iter_modules(stalkd.archive.__path__, "stalkd.archive."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = run_doctests(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert (result.attempted > 0) == (name not in NO_EXAMPLES)
