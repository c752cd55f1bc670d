"""The build switch and the stand-in for ``import cython``: their examples hold, every module
Cython compiles has its .py file (the fallback, and what setup.py compiles), and the names that
module uses of ``cython`` exist in the stand-in, so it also runs uncompiled without Cython."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from stalkd import cyshim, extensions
from support import run_doctests

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", [extensions, cyshim], ids=lambda m: m.__name__)
def test_docstring_examples(module: object) -> None:
    result = run_doctests(module)  # type: ignore[arg-type]
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("name", extensions.CYTHON_MODULES)
def test_each_compiled_module_is_a_python_file_using_only_what_the_stand_in_has(name: str) -> None:
    source = ROOT / extensions.source_path(name)
    tree = ast.parse(source.read_text())
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cython"}
    missing = {attr for attr in used if not hasattr(cyshim, attr)}
    assert not missing, f"{name} uses cython.{sorted(missing)}, which stalkd.cyshim lacks"
