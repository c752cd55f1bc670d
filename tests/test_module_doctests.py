"""The examples in every other stalkd module's docstrings are true: the packages without a
doctest file of their own (admin, server, node, client, outbox, spark and the top-level
modules), run as doctests. The engine, persist, log, protocol, replication, ha, worker and
archive packages have theirs beside their tests."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import stalkd
from support import run_doctests

OWN_FILES = ("stalkd.engine", "stalkd.persist", "stalkd.log", "stalkd.protocol", "stalkd.replication",
             "stalkd.ha", "stalkd.worker", "stalkd.archive")
MODULES = sorted(m.name for m in pkgutil.walk_packages(stalkd.__path__, "stalkd.")
                 if not m.name.startswith(OWN_FILES))


def test_the_modules_with_examples_are_found() -> None:
    assert {"stalkd.admin.ops", "stalkd.server.turns", "stalkd.client._address", "stalkd.spark.schema"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = run_doctests(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
