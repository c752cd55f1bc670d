"""docs/*.md show the tested example files as they are (scripts/sync_docs.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_code_blocks_equal_the_tested_files() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "sync_docs.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_recipes_show_every_example_file_they_name() -> None:
    text = (ROOT / "docs" / "recipes.md").read_text()
    for path in ("examples/django_shop/shop/orders.py", "examples/fastapi_app/receipts_api.py",
                 "examples/django_shop/shop/management/commands/stalkd_relay.py"):
        assert f"<!-- file: {path} -->" in text
        assert (ROOT / path).read_text() in text
