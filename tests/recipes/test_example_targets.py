"""Every ``stalkd worker MODULE:APP`` an example names (in its README or its files' text) loads
as the worker loads it: from the example's directory, in a fresh process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TARGET = re.compile(r"stalkd worker ([\w.]+):(\w+)")


def _named(example: Path) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for f in [example / "README.md", *example.rglob("*.py")]:
        found |= set(TARGET.findall(f.read_text()))
    return found


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
def test_every_worker_target_an_example_names_loads(example: str, tmp_path: Path) -> None:
    pytest.importorskip("django" if example == "django_shop" else "fastapi")
    root = EXAMPLES / example
    assert (root / "README.md").exists(), f"examples/{example} has no README.md"
    targets = _named(root)
    assert targets, f"examples/{example} names no worker target"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STALKD_", "SHOP_", "DJANGO_"))}
    env.update(SHOP_DB=str(tmp_path / "shop.sqlite3"), PYTHONPATH=str(root))
    for module, attr in sorted(targets):
        code = ("import importlib; from stalkd.worker import App\n"
                f"assert isinstance(getattr(importlib.import_module({module!r}), {attr!r}), App)")
        done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"stalkd worker {module}:{attr}: {done.stderr[-600:]}"
