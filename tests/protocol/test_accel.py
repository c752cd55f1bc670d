"""Which hot path runs, and that building it is optional: the C accelerator when it is built
and not disabled, the pure-Python modules under ``STALKD_NO_EXTENSIONS=1`` or without it, a
failed compile never failing the install, and ``stalkd serve --version`` saying which one."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from stalkd.extensions import CYTHON_MODULES, extensions_disabled, source_path
from stalkd.protocol import IMPLEMENTATION, Parser, accel
from stalkd.protocol import parser as pure

ROOT = Path(__file__).resolve().parents[2]
_DISABLED = os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")
_BUILT = importlib.util.find_spec("stalkd.protocol._speedups") is not None


def test_the_active_implementation_follows_the_build_and_the_switch() -> None:
    expected = "c" if _BUILT and not _DISABLED else "python"
    assert expected == IMPLEMENTATION
    assert (Parser is pure.Parser) == (expected == "python")
    assert (accel.speedups is None) == (expected == "python")


def _version(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "STALKD_NO_EXTENSIONS"} | env_extra
    cmd = [sys.executable, "-m", "stalkd.node.cli", "-v"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=True).stdout


def test_version_names_the_hot_path() -> None:
    off = _version({"STALKD_NO_EXTENSIONS": "1"})
    assert off.startswith("beanstalkd 1.13") and "hot path: pure Python" in off
    # every compiled twin is named, and the switch turns each of them off
    for name in ("protocol.accel", "server.fastconn"):
        assert f"stalkd.{name}.IMPLEMENTATION='python'" in off, name
    assert f"compiled by Cython: none (0 of {len(CYTHON_MODULES)}" in off
    on = _version({})
    assert ("hot path: C accelerator" in on) == _BUILT
    cython_built = all(_is_built(name) for name in CYTHON_MODULES)
    assert (f"({len(CYTHON_MODULES)} of {len(CYTHON_MODULES)})" in on) == cython_built, on


def _is_built(module: str) -> bool:
    """Whether a compiled build of ``module`` sits beside its .py file."""
    source = ROOT / source_path(module)
    return any(source.parent.glob(source.stem + ".*.so"))


def test_the_switch_runs_the_py_file_of_each_compiled_module() -> None:
    code = ("import stalkd, importlib, sys; from stalkd.extensions import CYTHON_MODULES as M; "
            "print(all(importlib.import_module(m).__file__.endswith('.py') for m in M))")
    env = {k: v for k, v in os.environ.items() if k != "STALKD_NO_EXTENSIONS"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=env | {"STALKD_NO_EXTENSIONS": "1"}, check=True)  # fmt: skip
    assert run.stdout.strip() == "True"


@pytest.mark.skipif(extensions_disabled(), reason="a build in a subprocess, the same under the pure-Python "
                    "switch: the compiled pass runs it")
def test_a_missing_compiler_is_a_warning_not_a_failed_build(tmp_path: Path) -> None:
    # setup.py alone with the C source, built with a compiler that does not exist
    shutil.copy(ROOT / "setup.py", tmp_path)
    (tmp_path / "src/stalkd/protocol").mkdir(parents=True)
    shutil.copy(ROOT / "src/stalkd/protocol/_speedups.c", tmp_path / "src/stalkd/protocol")
    shutil.copytree(ROOT / "src/stalkd/protocol/_cext", tmp_path / "src/stalkd/protocol/_cext")
    # and the Python modules Cython compiles, with the list of them
    shutil.copy(ROOT / "src/stalkd/extensions.py", tmp_path / "src/stalkd")
    for name in CYTHON_MODULES:
        (tmp_path / source_path(name)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source_path(name), tmp_path / source_path(name))
        pxd = (ROOT / source_path(name)).with_suffix(".pxd")
        if pxd.exists():  # the module's C types (heap.pxd, objects.pxd, ...)
            shutil.copy(pxd, (tmp_path / source_path(name)).with_suffix(".pxd"))
    env = {k: v for k, v in os.environ.items() if k != "STALKD_NO_EXTENSIONS"}
    env["CC"] = str(tmp_path / "no-such-cc")
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "out"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "WARNING: not compiled: stalkd.protocol._speedups" in r.stderr
    assert not list(tmp_path.glob("out/**/_speedups*"))
    assert not list(tmp_path.glob("out/**/*.so"))


def test_a_module_from_older_sources_falls_back_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    # what an editable install left behind after a source update without a rebuild looks like:
    # a _speedups whose configure() does not take this table
    stale = types.ModuleType("stalkd.protocol._speedups")

    def configure(**kw: object) -> None:
        raise TypeError("function takes at most 9 keyword arguments (11 given)")

    stale.configure = configure  # type: ignore[attr-defined]
    monkeypatch.delenv("STALKD_NO_EXTENSIONS", raising=False)
    monkeypatch.setattr(accel, "compiled_module", lambda name: stale)
    with pytest.warns(RuntimeWarning, match="make ext"):
        assert accel._load() is None
