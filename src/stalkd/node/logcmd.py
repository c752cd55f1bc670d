"""``stalkd log``: the log layer's command (``stalkd.log.cli``) with a data directory's checks
(``stalkd.persist.datadir``) and the archive's (``stalkd.archive``) plugged in.

The log layer knows neither snapshots nor archives; this is where the three meet, so no layer
imports one above it. Heavy pieces load only when a path calls for them: ``stalkd log`` on a
directory never imports pyarrow.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from stalkd.log.layout import DATA_LOG_DIR
from stalkd.persist import datadir

__all__ = ["log_main"]


class _DataDirHooks:
    """What ``stalkd.log.cli`` asks about a data directory's log and about archives."""

    is_data_log = staticmethod(datadir.is_data_log)
    check = staticmethod(datadir.check)
    repair = staticmethod(datadir.repair)
    describe_records = staticmethod(datadir.describe_records)

    @staticmethod
    def is_archive(path: str) -> bool:
        if "://" not in path and not os.path.isfile(os.path.join(path, "manifest.json")):
            return False  # not even a candidate
        from stalkd.archive.inspect import looks_like_archive

        return looks_like_archive(path)

    @staticmethod
    def inspect_archive(url: str, verify: bool) -> dict[str, Any]:
        from stalkd.archive.inspect import inspect_archive

        return inspect_archive(url, verify)

    @staticmethod
    def shipped_to(log_dir: str) -> str | None:
        if os.path.basename(os.path.normpath(log_dir)) != DATA_LOG_DIR:
            return None  # a log directory of its own, not a server's wal/
        from stalkd.archive.note import read_note

        return read_note(os.path.dirname(os.path.normpath(log_dir)))


def log_main(argv: Sequence[str]) -> int:
    """``stalkd log``: the log layer's command, with the data-directory and archive checks."""
    from stalkd.log.cli import main

    return main(argv, hooks=_DataDirHooks())
