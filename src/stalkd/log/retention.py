"""Retention: sealed segments nobody needs any more are deleted, or moved to ``archive/``.

Ensures: a segment goes only when it is sealed and every offset in it is below the floor the
caller gives and below every consumer group's committed head; the active segment never goes;
the removal is durable (directory fsynced) when ``retain`` returns; a removal that fails leaves
the segments not yet removed tracked, so the log stays dense in offsets.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .reader import ARCHIVE_DIR
from .writer import SegmentWriter

if TYPE_CHECKING:
    from .group import ConsumerGroup

__all__ = ["retain"]


def retain(
    writer: SegmentWriter,
    floor: int,
    groups: Iterable[ConsumerGroup],
    archive: bool,
    forget: Callable[[str], None],
) -> list[str]:
    """Remove (or archive) the sealed segments wholly below ``floor`` and every group's head.

    ``forget(path)`` is called before a segment file goes (to drop a cached mapping). Returns
    the paths removed, or the archive paths they were moved to.
    """
    bound = floor
    for g in groups:
        g.enforce_lag()
        bound = min(bound, g.committed)
    doomed = writer.drop_sealed(bound)
    if not doomed:
        return []
    root, fs = writer.path, writer.fs
    out = []
    if archive:
        fs.makedirs(os.path.join(root, ARCHIVE_DIR))
    for i, (_base, _end, p) in enumerate(doomed):
        forget(p)
        try:
            if archive:
                target = os.path.join(root, ARCHIVE_DIR, os.path.basename(p))
                fs.replace(p, target)
                out.append(target)
            else:
                fs.unlink(p)
                out.append(p)
        except BaseException:
            writer.restore_sealed(doomed[i:])
            raise
    if archive:
        fs.fsync_dir(os.path.join(root, ARCHIVE_DIR))
    fs.fsync_dir(root)
    return out
