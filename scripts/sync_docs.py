"""Keep the code in docs/*.md equal to the tested files it shows.

A fenced block right after a line ``<!-- file: PATH -->`` is the whole of PATH (relative to the
repository). ``python scripts/sync_docs.py`` rewrites the blocks from the files;
``--check`` only reports blocks that differ (tests/recipes/test_docs.py runs it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- file: (?P<path>[^ ]+) -->\n```(?P<lang>\w*)\n)(?P<code>.*?)(```\n)",
                   re.DOTALL)


def synced(text: str) -> str:
    def fill(m: re.Match[str]) -> str:
        code = (ROOT / m["path"]).read_text()
        return m.group(1) + code + ("" if code.endswith("\n") else "\n") + m.group(5)

    return BLOCK.sub(fill, text)


def main(argv: list[str]) -> int:
    stale = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()
        new = synced(text)
        if new != text:
            stale.append(doc.relative_to(ROOT))
            if "--check" not in argv:
                doc.write_text(new)
    if stale and "--check" in argv:
        print(f"out of date (run python scripts/sync_docs.py): {', '.join(map(str, stale))}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
