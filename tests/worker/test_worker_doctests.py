"""The examples in the worker's and outbox's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

from support import run_doctests

MODULES = [
    "stalkd.worker", "stalkd.worker.app", "stalkd.worker.backoff", "stalkd.worker.serializer",
    "stalkd.worker.errors", "stalkd.worker.context", "stalkd.worker.unique",
    "stalkd.worker.testing", "stalkd.worker.runner", "stalkd.worker.middleware",
    "stalkd.worker.middleware.base", "stalkd.worker.middleware.heartbeat",
    "stalkd.worker.middleware.retries", "stalkd.worker.middleware.prometheus",
    "stalkd.worker.schedule", "stalkd.worker.cancel", "stalkd.worker.limits",
    "stalkd.worker.stopflag", "stalkd.worker.denied", "stalkd.worker.task", "stalkd.worker.presence",
    "stalkd.worker.pipeline",
    "stalkd.outbox", "stalkd.outbox.table", "stalkd.outbox.relay",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = run_doctests(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
