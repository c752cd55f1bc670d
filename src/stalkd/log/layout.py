"""Where a log lives: resolve what a person typed (a log directory or a server data directory).

``stalkd serve -b D`` keeps its log in ``D/wal``; people then type ``D`` to every reading
command. ``resolve_log_dir`` accepts both, and refuses a directory holding no stalkd log
instead of letting a reader return nothing.

Ensures: the returned directory holds segment files (live or in ``archive/``) or the writer's
``LOCK`` file; anything else raises :class:`NotALogError` naming the path and what was looked for.

Example::

    >>> import tempfile
    >>> resolve_log_dir(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    stalkd.log.errors.NotALogError: ...: no stalkd log here ...
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import NotALogError
from .reader import ARCHIVE_DIR
from .segment import parse_segment_name

__all__ = ["resolve_log_dir", "is_log_dir", "DATA_DIR_LOG"]

DATA_DIR_LOG = "wal"  # where a server data directory keeps its log (engine.wal.LOG_DIR)
_LOCK = "LOCK"  # log.log.LOCK_NAME; not imported, so readers need not import the writer


def _has_segments(d: Path) -> bool:
    try:
        return any(parse_segment_name(n) is not None for n in os.listdir(d))
    except (FileNotFoundError, NotADirectoryError):
        return False


def is_log_dir(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` holds a stalkd log: segments, archived segments, or a writer's lock."""
    d = Path(path)
    return _has_segments(d) or _has_segments(d / ARCHIVE_DIR) or (d / _LOCK).is_file()


def resolve_log_dir(path: str | os.PathLike[str]) -> Path:
    """The log directory ``path`` names: ``path`` itself, or ``path/wal`` for a server data dir.

    Raises :class:`NotALogError` when neither holds a stalkd log (or ``path`` does not exist).
    """
    d = Path(path)
    if not d.exists():
        raise NotALogError(f"{d}: no such directory (expected a stalkd log directory, or a server "
                           f"data directory holding {DATA_DIR_LOG}/)", path=str(d))
    if not d.is_dir():
        raise NotALogError(f"{d}: not a directory (expected a stalkd log directory, or a server "
                           f"data directory holding {DATA_DIR_LOG}/)", path=str(d))
    if is_log_dir(d):
        return d
    if is_log_dir(d / DATA_DIR_LOG):
        return d / DATA_DIR_LOG
    raise NotALogError(f"{d}: no stalkd log here (looked for seg-*.log segment files in {d}, "
                       f"{d / ARCHIVE_DIR} and {d / DATA_DIR_LOG}); pass a log directory or the "
                       "server's data directory (-b DIR)", path=str(d))
