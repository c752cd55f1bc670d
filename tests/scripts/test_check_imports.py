"""scripts/check_imports.py, run as `make lint` runs it, on small packages written for the test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_imports.py"


def check(src: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *flags, str(src), "pkg"],
                          capture_output=True, text=True, timeout=60)


def write(src: Path, files: dict[str, str], package: str = "pkg") -> Path:
    for name, text in files.items():
        path = src / package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return src


def test_an_import_time_cycle_fails_and_names_every_edge(tmp_path: Path) -> None:
    src = write(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "try:\n    from .c import X\nexcept ImportError:\n    pass\n",
        "c.py": "import pkg.a\nX = 1\n",
        "d.py": "from pkg.a import *\n",  # imports into the cycle, not part of it
    })
    r = check(src)
    assert r.returncode == 1, r.stdout
    assert "import cycle (import-time): 3 modules, e.g. pkg.a -> pkg.b -> pkg.c -> pkg.a" in r.stdout
    for edge in ("pkg.a imports pkg.b", "pkg.b imports pkg.c", "pkg.c imports pkg.a"):
        assert edge in r.stdout
    assert "pkg.d" not in r.stdout


def test_deferred_and_typing_cycles_are_notes_unless_counted(tmp_path: Path) -> None:
    src = write(tmp_path, {
        "__init__.py": "",
        "log.py": "from pkg import group\n",
        "group.py": "def f():\n    from pkg.log import X\n",
        "job.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.tube import T\n",
        "tube.py": "import pkg.job\n",
    })
    r = check(src)
    assert r.returncode == 0, r.stdout
    assert "note, not counted: cycle once deferred imports count: 2 modules" in r.stdout
    assert "pkg.group imports pkg.log (deferred" in r.stdout
    assert "note, not counted: cycle once typing imports count: 2 modules" in r.stdout
    assert "no import cycles among 5 modules of pkg counting import-time imports" in r.stdout
    # When deferred imports count, the log/group cycle fails the check but the typing one does not
    r = check(src, "--count", "deferred")
    assert r.returncode == 1 and "1 import cycle(s) in pkg counting deferred imports" in r.stdout
    r = check(src, "--count", "typing")
    assert r.returncode == 1 and "2 import cycle(s)" in r.stdout


def test_the_project_has_no_import_time_cycle() -> None:
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60,
                       cwd=SCRIPT.parents[1])
    assert r.returncode == 0, r.stdout


def _stalkd_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    return write(tmp_path, {"__init__.py": "", "engine/__init__.py": "", "server/__init__.py": "",
                            "admin/__init__.py": "", **files}, package="stalkd")


def test_a_layer_importing_one_above_it_fails_even_deferred(tmp_path: Path) -> None:
    src = _stalkd_tree(tmp_path, {
        "engine/rules.py": "def f():\n    from stalkd.server import app\n",  # deferred, still upward
        "server/app.py": "from stalkd.engine import rules\n",  # downward: fine
        "admin/ops.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from stalkd.node import x\n",
    })
    r = subprocess.run([sys.executable, str(SCRIPT), str(src), "stalkd"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout
    assert ("upward arrow: stalkd.engine.rules imports stalkd.server.app (deferred): "
            "stalkd.engine is below stalkd.server") in r.stdout
    assert "upward arrow: stalkd.server.app" not in r.stdout
    assert "admin.ops" not in r.stdout  # an import for the type checker only is no arrow


def test_a_package_in_no_layer_fails(tmp_path: Path) -> None:
    src = _stalkd_tree(tmp_path, {"gadgets/__init__.py": "", "gadgets/thing.py": ""})
    r = subprocess.run([sys.executable, str(SCRIPT), str(src), "stalkd"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "stalkd.gadgets.thing is in no layer" in r.stdout


def test_the_project_has_no_upward_arrow() -> None:
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60,
                       cwd=SCRIPT.parents[1])
    assert r.returncode == 0, r.stdout
    assert "no upward arrow" in r.stdout
