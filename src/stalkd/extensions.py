"""The one switch every compiled module obeys: ``STALKD_NO_EXTENSIONS=1`` in the environment runs
the pure-Python references instead (read here, below every layer, so the log can ask it too).

Example:
    >>> extensions_disabled() in (True, False)
    True
"""

from __future__ import annotations

import os

__all__ = ["extensions_disabled"]


def extensions_disabled() -> bool:
    """``STALKD_NO_EXTENSIONS=1``: run the pure-Python references of every compiled module."""
    return os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")
