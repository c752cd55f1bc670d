"""The WAL's disk room: what ``Wal`` promises before the engine runs a command, and a snapshot's reserve.

A mixin of ``Wal`` (``Wal.__init__`` sets the state). Room is promised (``admit``) before the engine
applies a change and settled after it, over ``space.SpaceBudget`` and its spare segments, so a full
disk refuses puts but never a delete; while the disk is short, a preallocated file in
``snapshots/`` keeps the room the snapshot that frees the dead WAL needs. The per-command steps
(``admit``, ``settle``) are ``wal.WalBatches``' (compiled); this module keeps the budget's set-up
and the reserve.

The reserve grows with the live data: before the WAL takes another spare segment's room (the only
way the live data can grow by more than the room already held), the reserve is made to cover the
live data plus that segment, or the spare is refused. So whatever the live data, when dead WAL
fills the disk the snapshot that drops it fits in the reserve, and puts are accepted again
without anyone freeing space. The price is disk room about the size of the live data.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from stalkd.engine.space import SHORT_FRAME, SpaceBudget, no_space, put_frame
from stalkd.log import Log
from stalkd.log.fs import FileSystem, create_whole

__all__ = ["SNAP_RESERVE", "SPARE_FILE", "WalSpace"]

SPARE_FILE = "wal-spare"  # spare segments of earlier versions (now wal/spares/, space.py)
SNAP_RESERVE = "reserve.spare"  # in snapshots/: room for a snapshot on a full disk
_log = logging.getLogger("stalkd.persist.wal")


class WalSpace:
    """The room-keeping steps of ``Wal``."""

    directory: str
    snap_dir: str
    log: Log
    fs: FileSystem
    segment_size: int
    space: SpaceBudget | None
    _live_bytes: Callable[[], int] = staticmethod(lambda: 0)  # the snapshot's estimate (set by recover)

    def _open_space(self, live_jobs: int, max_job_size: int) -> None:
        if self.space is not None:
            self.space.close()
        # The waste bound per segment tail is the largest frame, capped at an eighth of a segment:
        # with segments under 8x the largest put, big puts may be promised slightly too little
        # room (a put bigger than a segment gets an oversize segment of its own anyway).
        waste = min(put_frame(max_job_size), max(SHORT_FRAME, self.segment_size // 8))
        old = os.path.join(self.directory, SPARE_FILE)
        if os.path.lexists(old):  # the single spare file of earlier versions: its room is freed
            os.unlink(old)
        # (the log's writer: the budget reads the active segment's span itself, per command)
        sp = SpaceBudget(self.log.path, self.segment_size, waste, self.log.active_span, self.fs, self.log._writer)
        sp.before_grow = self._reserve_covers_growth
        self.space = sp
        # Every live job may be deleted: that room is promised from the start.
        if not sp.admit(live_jobs * SHORT_FRAME):
            sp.promised += live_jobs * SHORT_FRAME
            _log.warning("%s: no room to reserve the deletes of %d recovered jobs; puts are refused "
                        "until space is freed", self.directory, live_jobs)  # fmt: skip

    def reset_space(self, live_jobs: int, max_job_size: int) -> None:
        """Promise room again from scratch (a standby becoming primary: its puts were the
        primary's, promised there)."""
        self._open_space(live_jobs, max_job_size)

    # --- compaction while the disk is full ------------------------------------------------------

    def space_short(self) -> bool:
        return self.space is not None and self.space.short

    def _snapshot_done(self) -> None:
        if self.space is not None:
            self.space.short = False
        self._keep_snapshot_reserve()

    def _snapshot_reserve(self) -> str | None:
        # Only while the disk is short: a snapshot then may find no other room at all.
        return os.path.join(self.snap_dir, SNAP_RESERVE) if self.space_short() else None

    def _reserve_size(self) -> int:
        """The room a snapshot needs until the WAL next takes a spare: the live data's estimate plus
        one spare's room and one largest frame (what the live data can grow by meanwhile)."""
        frame = self.space.max_frame if self.space is not None else 0
        return max(4096, self._live_bytes() + self.segment_size + frame)

    def _reserve_covers_growth(self) -> bool:
        """Before the WAL takes another spare: the reserve covers the live data plus that spare,
        grown now if not; False (the spare is refused) if there is no room for it."""
        return self._size_reserve(self._reserve_size())

    def _keep_snapshot_reserve(self) -> None:
        """Preallocate the room a snapshot needs when the disk is full (``_reserve_size``), or
        give back what a much smaller live data no longer needs. Best effort: without room now,
        the next spare the WAL wants grows it first."""
        self._size_reserve(self._reserve_size(), shrink=True)

    def _size_reserve(self, size: int, shrink: bool = False) -> bool:
        """Make the reserve at least ``size`` bytes (with ``shrink``, at most twice that);
        False when the file system has no room for it."""
        path = os.path.join(self.snap_dir, SNAP_RESERVE)
        fs = self.fs
        try:
            have = os.stat(path).st_size
        except FileNotFoundError:
            have = -1
        if have >= size:
            if shrink and have > 2 * size:
                fd = fs.open(path, os.O_WRONLY)
                try:
                    os.ftruncate(fd, size)  # the blocks past it go back to the file system
                finally:
                    os.close(fd)
            return True
        try:
            if have < 0:  # (recovery deletes a .tmp a crash leaves in the snapshot directory)
                create_whole(fs, path, lambda fd: fs.allocate(fd, 0, size))
                return True
            fd = fs.open(path, os.O_WRONLY)
            try:
                fs.allocate(fd, 0, size)
            finally:
                os.close(fd)
        except OSError as e:
            if not no_space(e):
                raise
            return False
        return True
