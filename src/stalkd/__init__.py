"""stalkd: a durable, beanstalkd-compatible job queue.

Layers (each usable on its own): ``stalkd.log`` (storage engine), ``stalkd.engine`` (job
semantics), ``stalkd.protocol`` + ``stalkd.server`` (beanstalkd over TCP), ``stalkd.client`` +
``stalkd.worker`` (Python side), ``stalkd.spark`` (data sources and analytics).

Public names are imported lazily so that ``import stalkd`` stays cheap for the server's start-up.
"""

from __future__ import annotations

import importlib

from stalkd.extensions import install_switch

MYPY = False
if MYPY:  # for type checkers only: importing typing adds ~15 ms before `stalkd serve` listens
    from typing import Any

__version__ = "0.1.0"

# name -> module that defines it; filled in as the layers land.
_LAZY: dict[str, str] = {
    "Log": "stalkd.log",
    "LogReader": "stalkd.log",
    "Client": "stalkd.client",
    "AsyncClient": "stalkd.client",
    "App": "stalkd.worker",
}

__all__ = ["__version__", *_LAZY]

install_switch()  # STALKD_NO_EXTENSIONS=1: the .py file of each compiled module, not its build


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stalkd' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
