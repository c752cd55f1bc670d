"""The build switch and the stand-in for ``import cython``: their examples hold, every module
Cython compiles has its .py file (the fallback, and what setup.py compiles), and the names that
module uses of ``cython`` exist in the stand-in, so it also runs uncompiled without Cython; and
``make`` removes a compiled module an in-place build left after its source went; a module that
fails to compile is left out alone, and runs from its source, not from an earlier build of it."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
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


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_removes_a_compiled_module_whose_source_is_gone(tmp_path: Path) -> None:
    # the Makefile and the list of Cython modules, in a tree of built modules with and without sources
    shutil.copy(ROOT / "Makefile", tmp_path)
    (tmp_path / "src/stalkd/log").mkdir(parents=True)
    shutil.copy(ROOT / "src/stalkd/extensions.py", tmp_path / "src/stalkd")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    compiled = extensions.CYTHON_MODULES[0]
    kept = {  # a Cython module of the list, a C leaf, and the one (the .py of a module off the list)
        tmp_path / extensions.source_path(compiled): tmp_path / extensions.source_path(compiled).replace(".py", suffix),
        tmp_path / "src/stalkd/log/_leaf.c": tmp_path / f"src/stalkd/log/_leaf{suffix}",
    }
    gone = [tmp_path / f"src/stalkd/log/_removed{suffix}", tmp_path / "src/stalkd/log/dropped.abi3.so"]
    (tmp_path / "src/stalkd/log/dropped.py").write_text("")  # still a .py file, no longer compiled
    for source, built in kept.items():
        source.parent.mkdir(parents=True, exist_ok=True)
        source.touch()
        built.write_bytes(b"\x7fELF")
    for built in gone:
        built.write_bytes(b"\x7fELF")
    r = subprocess.run(["make", "-s", "stale-ext", f"PYTHON={sys.executable}"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert all(built.exists() for built in kept.values())
    assert not any(built.exists() for built in gone)


@pytest.mark.skipif(extensions.extensions_disabled(), reason="the pure-Python switch is on")
@pytest.mark.skipif(not any(shutil.which(cc) for cc in ("cc", "gcc")), reason="no C compiler: the install is pure")
def test_where_a_compiler_exists_every_listed_module_runs_compiled() -> None:
    # A Cython error in one module makes setup.py skip it with a warning that pip -q does not
    # show: the compiled pass would then quietly test the .py file instead.
    pure = [name for name, compiled in extensions.compiled_modules().items() if not compiled]
    assert not pure, f"not compiled (see `make ext`'s output): {pure}"


@pytest.mark.skipif(importlib.util.find_spec("Cython") is None, reason="Cython is not installed")
@pytest.mark.skipif(not any(shutil.which(cc) for cc in ("cc", "gcc")), reason="no C compiler")
def test_a_module_that_fails_to_compile_runs_from_its_source_and_the_others_still_compile(tmp_path: Path) -> None:
    # setup.py over a tree of three modules: one Cython compiles, one it refuses, and a C leaf
    # gcc refuses; each with a compiled copy an earlier in-place build left, as a developer's
    # tree has after editing a module into something Cython rejects
    shutil.copy(ROOT / "setup.py", tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "t"\nversion = "0"\n\n[tool.setuptools.packages.find]\nwhere = ["src"]\n')
    pkg = tmp_path / "src/stalkd"
    (pkg / "protocol").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "extensions.py").write_text(
        'CYTHON_MODULES = ("stalkd.good", "stalkd.bad")\n\n'
        'def source_path(name):\n    return "src/" + name.replace(".", "/") + ".py"\n')
    (pkg / "good.py").write_text("def answer():\n    return 42\n")
    (pkg / "bad.py").write_text('import cython\n\nx = cython.declare(cython.int, "not an int")\n')
    (pkg / "protocol/_speedups.c").write_text("#error a leaf that does not compile\n")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    stale = {name: pkg / f"{name}{suffix}" for name in ("good", "bad", "protocol/_speedups")}
    for path in stale.values():
        path.write_bytes(b"an earlier build")
    env = {k: v for k, v in os.environ.items() if k != "STALKD_NO_EXTENSIONS"}  # the build under test
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr  # a failed compile is a warning, not a failed install
    assert "not compiled: stalkd.bad" in r.stderr and "not compiled: stalkd.protocol._speedups" in r.stderr
    assert not stale["bad"].exists() and not stale["protocol/_speedups"].exists()
    assert stale["good"].read_bytes() != b"an earlier build"
    check = "import stalkd.good as g; print(g.answer(), g.__file__.endswith('.so'))"
    out = subprocess.run([sys.executable, "-c", check], cwd=tmp_path / "src", capture_output=True, text=True,
                         timeout=60, env={"PATH": os.environ.get("PATH", "")})  # fmt: skip
    assert out.stdout.split() == ["42", "True"], out.stderr
