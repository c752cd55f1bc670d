"""Putting a copy of the primary's state in place of the local one, so that a power cut at any
moment leaves one of the two whole, never neither.

A standby that resyncs while it runs (``standby.Standby``) has the copy made in ``DIR/resync/``
(``catchup.catch_up``). ``swap_in`` then takes these steps, each durable before the next:

1. ``resync/READY`` records why: from here on the copy is complete and is to replace the local
   state, so a start that finds it finishes the swap;
2. the local ``wal/`` and ``snapshots/`` move to ``quarantine/`` (``catchup.quarantine``);
3. the copy's ``wal/`` and ``snapshots/`` are renamed into the data directory, which is fsynced,
   and then ``resync/``, which they left;
4. ``resync/`` is removed and the data directory fsynced again.

A rename is durable once both of its directories are fsynced. Where a file system keeps a new
entry only then (the strictest reading of POSIX, the power-loss campaign's), a cut between the two
fsyncs of step 3 may leave the copy's directories under ``resync/`` still, and an earlier cut may
leave the old ones in place. ``settle`` runs before anything opens the data directory: it repeats
steps 2 to 4 when it finds ``READY`` beside a copy's ``wal/``, and otherwise removes ``resync/``
(a copy cut short, or one already swapped in). Before this order, a cut after a swap could bring
the node back with its WAL under ``resync/``, which the next start removed.
"""

from __future__ import annotations

import logging
import os

from stalkd.log.fs import REAL, FileSystem

__all__ = ["RESYNC_DIR", "settle", "swap_in"]

log = logging.getLogger("stalkd.replication")

RESYNC_DIR = "resync"  # in the data directory: the primary's copy while it is made
READY = "READY"  # in RESYNC_DIR: the copy is complete; its first line is the offset cut, its rest why
_SWAPPED = ("wal", "snapshots")


def swap_in(directory: str, staging: str, why: str, since: int | None, fs: FileSystem = REAL) -> None:
    """Replace ``directory``'s WAL and snapshots with the complete copy in ``staging`` (steps
    above); the old ones are quarantined with ``why`` (``since``: the first offset they hold that
    the primary does not)."""
    fd = fs.open(os.path.join(staging, READY), os.O_WRONLY, create=True, truncate=True)
    try:
        fs.write_all(fd, f"{'' if since is None else since}\n{why}".encode())
        fs.fsync(fd)
    finally:
        os.close(fd)
    fs.fsync_dir(staging)
    _finish(directory, staging, why, since, fs)


def settle(directory: str, fs: FileSystem = REAL) -> str | None:
    """Finish or clear a swap or a copy that a stop cut short; what was done (for the log), or
    None when there was nothing to do."""
    staging = os.path.join(directory, RESYNC_DIR)
    if not os.path.isdir(staging):
        return None
    ready = _read_ready(staging)
    if ready is not None and os.path.isdir(os.path.join(staging, "wal")):
        since, why = ready
        _finish(directory, staging, why, since, fs)
        return f"finished swapping in the primary's copy that a stop had cut short ({why})"
    _remove(directory, staging, fs)
    if ready is not None:
        return f"removed what was left of a swap of the primary's copy that a stop had cut short ({ready[1]})"
    return ("removed an incomplete copy of the primary's state that a stop had cut short; the local state "
            "is unchanged, and the standby fetches the copy again if it still needs one")


def _read_ready(staging: str) -> tuple[int | None, str] | None:
    try:
        with open(os.path.join(staging, READY), "rb") as f:
            first, _, why = f.read().decode("utf-8", "replace").partition("\n")
    except FileNotFoundError:
        return None
    return (int(first) if first.isdigit() else None), why


def _finish(directory: str, staging: str, why: str, since: int | None, fs: FileSystem) -> None:
    from stalkd.replication.catchup import quarantine  # here: it costs every server's start-up

    quarantine(directory, why, since, fs)
    for sub in _SWAPPED:
        src = os.path.join(staging, sub)
        if os.path.exists(src):
            fs.replace(src, os.path.join(directory, sub))
        else:  # a copy of a primary whose log still starts at 0 has no snapshot to bring
            fs.makedirs(os.path.join(directory, sub))
    fs.fsync_dir(directory)  # the copy is in place ...
    fs.fsync_dir(staging)  # ... and then no longer in resync/
    _remove(directory, staging, fs)


def _remove(directory: str, staging: str, fs: FileSystem) -> None:
    import shutil  # here: with its compressors it costs every server's start-up otherwise

    shutil.rmtree(staging)
    fs.fsync_dir(directory)
