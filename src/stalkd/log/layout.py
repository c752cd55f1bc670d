"""Where a log lives: the one place a path a person typed becomes the directory of segments.

A person may name the log directory itself (``DATA/wal``, or any ``Log.open`` directory) or the
server's data directory (``stalkd serve -b DATA``), whose log is ``DATA/wal``. Every command that
reads a log (``stalkd log``, ``stalkd analyze``, the Spark source) resolves its path here, so a
directory holding no log is one clear error everywhere, never an empty result.

Ensures: ``resolve_log_dir`` returns a directory that holds segment files (live or archived) or a
writer's ``LOCK``, or raises ``NotALogError`` naming the path and what was expected there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .errors import NotALogError
from .segment import parse_segment_name

if TYPE_CHECKING:
    import pathlib

__all__ = ["DATA_LOG_DIR", "is_log_dir", "resolve_log_dir"]

DATA_LOG_DIR = "wal"  # the log inside a server data directory (``stalkd serve -b DIR``)
_LOCK = "LOCK"
_ARCHIVE = "archive"


def _has_segments(path: str) -> bool:
    try:
        names = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return False
    return any(parse_segment_name(n) is not None for n in names)


def is_log_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` itself is a log directory: segment files, archived segments, or a writer's
    ``LOCK`` (a log just created holds its first segment and its lock).

    >>> import tempfile
    >>> is_log_dir(tempfile.mkdtemp())
    False
    """
    p = os.fspath(path)
    return (
        _has_segments(p)
        or _has_segments(os.path.join(p, _ARCHIVE))
        or os.path.isfile(os.path.join(p, _LOCK))
    )


def resolve_log_dir(path: str | os.PathLike[str]) -> pathlib.Path:
    """The directory holding the segments of the log a person named with ``path``: the path
    itself when it is a log directory, ``path/wal`` when it is a server data directory.

    >>> import tempfile
    >>> from stalkd.log import Log
    >>> data = tempfile.mkdtemp()
    >>> Log.open(data + "/wal", durability="never").close()
    >>> resolve_log_dir(data).name
    'wal'
    >>> try:
    ...     resolve_log_dir(data + "/snapshots")
    ... except NotALogError as e:
    ...     print("no log" if "not a directory" in str(e) or "does not exist" in str(e) else e)
    no log
    """
    # pathlib (and with it urllib.parse and ipaddress, ~3.5 ms) only here: this module comes
    # with the package, which a server imports at start, and a server never resolves a path
    import pathlib

    p = pathlib.Path(path)
    if not p.exists():
        raise NotALogError(f"{p}: does not exist; expected a stalkd log directory (holding seg-*.log "
                           f"files) or a server data directory (stalkd serve -b DIR, holding {DATA_LOG_DIR}/)")
    if not p.is_dir():
        raise NotALogError(f"{p}: not a directory; expected a stalkd log directory (holding seg-*.log "
                           f"files) or a server data directory (stalkd serve -b DIR, holding {DATA_LOG_DIR}/)")
    if is_log_dir(p):
        return p
    if is_log_dir(p / DATA_LOG_DIR):
        return p / DATA_LOG_DIR
    raise NotALogError(
        f"{p}: no stalkd log here; expected seg-*.log segment files (a log directory) or a "
        f"{DATA_LOG_DIR}/ subdirectory holding them (a server data directory, as given to stalkd serve -b)"
    )
