"""The one switch every compiled module obeys: ``STALKD_NO_EXTENSIONS=1`` in the environment runs
the pure-Python references instead (read here, below every layer, so the log can ask it too).

Example:
    >>> extensions_disabled() in (True, False)
    True
    >>> compiled_module("stalkd.no_such_module") is None
    True
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["compiled_module", "extensions_disabled"]


def extensions_disabled() -> bool:
    """``STALKD_NO_EXTENSIONS=1``: run the pure-Python references of every compiled module."""
    return os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")


def compiled_module(name: str) -> ModuleType | None:
    """The compiled module ``name``, or None: switched off (``STALKD_NO_EXTENSIONS=1``) or not
    built (no compiler at install time), when its pure-Python reference runs instead."""
    if extensions_disabled():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
