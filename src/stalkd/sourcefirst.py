"""The import hook behind ``STALKD_NO_EXTENSIONS=1``: a compiled module's ``.py`` file wins.

Kept out of ``stalkd.extensions`` because it needs ``importlib.abc``, whose import pulls in
``importlib.resources`` (and with it ``tempfile``, ``shutil``, ``pathlib``...): every process
would pay for it at ``import stalkd``, while only a process with the switch set uses the hook.

Example:
    >>> finder = SourceFirst(("stalkd.log.gate",))
    >>> finder.find_spec("json", None) is None
    True
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["SourceFirst"]


class SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` file of each of ``modules`` (Cython compiled them), where the compiled
    one would load."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:  # fmt: skip
        if fullname not in self.modules:
            return None
        for finder in sys.meta_path:  # the next finder's answer (PathFinder, an editable install's)
            if finder is self or isinstance(finder, SourceFirst):
                continue
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = None if find is None else find(fullname, path, target)
            if spec is None:
                continue
            origin = spec.origin or ""
            if origin.endswith(".py"):
                return spec
            source = os.path.join(os.path.dirname(origin), fullname.rpartition(".")[2] + ".py")
            return importlib.util.spec_from_file_location(fullname, source) if os.path.exists(source) else spec
        return None
