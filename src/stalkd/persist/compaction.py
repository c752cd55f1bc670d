"""Compaction: a fuzzy snapshot copied a chunk per call on the loop thread, finished in the background.

When the WAL written since the last snapshot began exceeds ``max(compact_min_bytes, live bytes / 2)``,
or the segment files that snapshot keeps would pass the WAL's bound (``wal_bound``) at the next
segment (``snapshot_due``), ``maintain`` starts a snapshot: it notes the current seq and log offset and the jobs in
``snapshot.capture_order``, writes the live results (``results.py``) to the WAL again, then copies ``chunk_jobs`` of them per call, fewer when their
bodies reach ``chunk_bytes`` (so the event loop is never held for long), and finally hands the
file to a background thread that fsyncs the WAL (under every policy) and the snapshot, renames it into place, fsyncs the directory, drops
(or archives) WAL segments wholly below the snapshot's start offset, and deletes older
snapshots.

Ensures: at every instant (a crash before any file call of the steps above: tests/engine/test_crash.py)
the directory holds either the previous complete snapshot with all WAL segments it needs, or
the new complete snapshot with all WAL segments it needs; a failed snapshot leaves both intact
and the next ``maintain`` may try again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from stalkd.engine.engine import Engine
from stalkd.engine.jobtable import JobTable
from stalkd.engine.model import RESULT_FIXED, Record
from stalkd.engine.objects import Job
from stalkd.log import Log
from stalkd.log.frame import frame_size
from stalkd.persist.snapshot import SnapshotWriter, capture_order, list_snapshots

__all__ = ["CHUNK_BYTES", "TAIL_SHARE", "Compaction", "SnapInProgress", "WalError", "live_bytes", "snapshot_due",
           "wal_bound"]

# Body bytes copied per step at most (plus the job that crosses it). With 1024 jobs of 4 KiB a
# step held the loop ~20 ms and put->reserve p99 went to 18-35 ms after heavy write runs;
# 512 KiB is ~2-3 ms here, and jobs of up to 512 bytes still go 1024 per step.
CHUNK_BYTES = 512 * 1024
# A snapshot is due once the WAL since the last one outweighs this share of the live data
# (``snapshot_due``): what a restart after a kill replays record by record.
TAIL_SHARE = 2


def live_bytes(engine: Engine) -> int:
    """What the live data weighs in a snapshot and the results it writes again: bodies, plus 100
    bytes a job or result (a snapshot entry's fixed fields and tube share stay under that)."""
    return engine.body_bytes + engine.result_bytes + 100 * (len(engine.jobs) + len(engine.results))


def wal_bound(live: int, segment: int) -> int:
    """The WAL's segment files' bound under churn, ``live`` bytes of live data (``live_bytes``) and
    segments of ``segment`` bytes: twice the live data and two segments (issue 34). The snapshot
    trigger keeps the files it can free within it (``snapshot_due``), checked at least once per
    segment written. bench/crashloop_bench.py and bench/engine_bench.py print the same bound,
    computed themselves (they run older trees too).

    >>> wal_bound(100, 1000)
    2200
    """
    return 2 * live + 2 * segment


def snapshot_due(since: int, live: int, min_bytes: int, *, short: bool = False, kept: int = 0,
                 segment: int = 0) -> bool:  # fmt: skip
    """Whether a snapshot is due, ``since`` WAL bytes written after the last one began, with
    ``live`` bytes of live data (``live_bytes``). Normally once ``since`` outweighs a
    ``TAIL_SHARE``-th of the live data (and ``min_bytes``, a segment); while the disk is short of
    space (a put was refused: ``short``), as soon as it outweighs the live data at all: dropping
    dead WAL is then the only way room comes back.

    A share of the live data, not all of it: a restart replays the WAL a record at a time but
    loads a snapshot's jobs in bulk, so jobs that all stay live (puts nobody takes yet) must
    reach a snapshot too; their WAL never outweighs their own estimate, but it does a share of it,
    so such a stream snapshots each time its live data grows by that share, and a restart after a
    kill replays at most that share of the jobs one by one. A half, not a third or a quarter: a
    tail record costs recovery about twice what a snapshot's job does, and a smaller share copies
    each job into about two (a third) or three (a quarter) times as many snapshots and costs
    13–24 % more CPU per put while a queue grows, the common case paying for the rare one
    (bench/restart_bench.py measures both).

    Also once the segment files kept for the last snapshot (``kept`` bytes: the segments of
    ``segment`` bytes from the one holding its start to the active one, which the next snapshot
    lets go) would pass ``wal_bound`` when the WAL starts one more segment. The bytes' rule
    counts frames from the snapshot's start, anywhere in its segment, and is met only at a check
    (the server's: at start, at each sealed segment, and once a second), while files go only
    whole: a server killed before its second check, again and again, kept up to a segment's
    worth since the start check plus its run's writes, from a start late in its segment: three
    files of 4 MiB, 1.33x the bound for 0.5 MiB of live data (bench/crashloop_bench.py). This
    rule fires before the bytes' only with live data under about a segment, where the bound
    allows two files: it then snapshots at the first check after each segment starts, not a
    segment's worth of bytes after the last start, so snapshots stay one per segment written,
    as many as before, only moved to a segment's start. Segments retention keeps for another
    reason (a standby, the archive) are not counted: a snapshot would not free them, and
    counting them would take one at every check. The files stay within the bound while the
    checks come at least once per segment written (hence the server's check at each seal; a
    third file shows only while a snapshot in flight outlasts a whole segment's writes).

    >>> snapshot_due(50, 100, 10), snapshot_due(49, 100, 10), snapshot_due(9, 0, 10)
    (True, False, False)
    >>> snapshot_due(99, 100, 10, short=True), snapshot_due(100, 100, 10, short=True)
    (False, True)
    >>> snapshot_due(9, 0, 10, kept=20, segment=10), snapshot_due(9, 0, 10, kept=10, segment=10)
    (True, False)
    """
    if short:
        return since > 0 and since >= live
    return since >= max(min_bytes, live // TAIL_SHARE) or kept + segment > wal_bound(live, segment)


class WalError(Exception):
    """The WAL directory cannot give back the acknowledged state (names the files concerned)."""


def _chunk_end(jobs: list[Job], start: int, end: int, room: int) -> int:
    """Where a snapshot step that copies ``jobs[start:end]`` stops: at ``end``, or after the job
    whose body reaches ``room`` bytes of bodies (that job goes too, so every step moves on)."""
    i = start
    while i < end:
        j = jobs[i]
        room -= j.blen
        i += 1
        if room <= 0:
            break
    return i


def _still_live(chunk: list[Job], table: JobTable) -> list[Job]:
    """The jobs of ``chunk`` the engine's ``table`` still holds: one deleted since the snapshot
    began is not copied."""
    return [j for j in chunk if table.get(j.id) is j]


class SnapInProgress:
    """An in-progress snapshot (loop-thread state)."""

    def __init__(self, writer: SnapshotWriter, start_offset: int, jobs: list[Job], wal_bytes: int = 0,
                 kept_from: int = 0) -> None:  # fmt: skip
        self.writer = writer
        self.wal_bytes = wal_bytes  # WAL bytes since the previous snapshot: owed again if this one fails
        self.kept_from = kept_from  # the previous snapshot's start: its segments stay if this one fails
        self.start_offset = start_offset
        self.jobs = jobs  # capture_order at the start; a job deleted since is skipped
        self.pos = 0
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None


class Compaction:
    """The snapshot and retention steps of ``Wal`` (a mixin: ``Wal.__init__`` sets the state)."""

    log: Log
    snap_dir: str
    compact_min_bytes: int
    segment_size: int
    chunk_jobs: int
    chunk_bytes: int = CHUNK_BYTES
    background: bool
    last_seq: int
    records_migrated: int
    snapshots_written: int
    _bytes_since_snapshot: int
    _kept_from: int  # the last snapshot's start offset: segments from the one holding it are kept for it
    _retain_owed: bool  # recovery found segments wholly below the snapshot it loaded (``maintain``)
    _snap: SnapInProgress | None
    apply_pending: Callable[[], object] | None  # (``Wal.apply_pending``)

    def write(self, records: list[Record]) -> None:
        raise NotImplementedError  # Wal's

    def sync(self) -> None:
        raise NotImplementedError  # Wal's

    def admit(self, cost: int) -> bool:
        raise NotImplementedError  # Wal's

    def compaction_due(self, engine: Engine) -> bool:
        """``snapshot_due`` of the WAL written since the last snapshot, the segment files kept
        for it and the live data now."""
        return snapshot_due(self._bytes_since_snapshot, live_bytes(engine), self.compact_min_bytes,
                            short=self.space_short(), kept=self.kept_bytes(), segment=self.segment_size)  # fmt: skip

    def kept_bytes(self) -> int:
        """The segment files the last snapshot keeps: from the one holding its start to the
        active one, a segment's size each (what the next snapshot's retention may drop; older
        ones a standby or the archive holds are not counted)."""
        start = self._kept_from
        return self.segment_size * sum(1 for _, end, _ in self.log.segment_bounds() if end is None or end > start)

    def space_short(self) -> bool:
        """Whether puts were refused for lack of room since the last completed snapshot."""
        return False

    def _snapshot_failed(self, s: SnapInProgress) -> None:
        """The WAL the failed snapshot would have covered is still owed a snapshot, and the
        segments the previous one keeps are still kept."""
        self._bytes_since_snapshot += s.wal_bytes
        self._kept_from = s.kept_from

    def _snapshot_done(self) -> None:
        """A snapshot completed and the WAL below it was retired."""

    def _snapshot_reserve(self) -> str | None:
        """A preallocated file the next snapshot should be written into, if any."""
        return None

    def maintain(self, engine: Engine, now: float, *, force: bool = False) -> bool:
        """Advance compaction by one bounded step (``chunk_jobs`` jobs); True while a snapshot
        is in progress. ``force`` starts one even if not due.

        Call it on the loop thread, after ``write`` of every record the engine produced.
        A WalError here (say, no space for the snapshot file) means only that this snapshot was
        dropped: the WAL and the previous snapshot are intact, and a later call tries again.
        """
        s = self._snap
        if s is None:
            if self._retain_owed:
                self._retain_owed = False
                self._retain_recovered()
            if not (force or self.compaction_due(engine)) or engine.seq != self.last_seq:
                return False
            self._begin(engine)
            return True
        if s.thread is not None:
            if s.thread.is_alive():
                return True
            self._snap = None
            if s.error is not None:
                self._snapshot_failed(s)
                raise WalError(f"{self.snap_dir}: snapshot failed: {s.error}") from s.error
            self._snapshot_done()
            return False
        self._copy_chunk(engine, s)
        if s.pos >= len(s.jobs):
            self._complete(engine, s)
        return self._snap is not None

    def _retain_recovered(self) -> None:
        """The retention a crash cut short: the segments wholly below the start of the snapshot
        recovery loaded go now, as ``_finalize`` would have let them go after it. A kill between
        its rename and its retention left one behind, and nothing dropped it before the next
        snapshot, which with little live data comes only once the WAL holds two more segments:
        three files at a kill (1.33x the bound, bench/crashloop_bench.py's 500 cycles met it
        once). At the first ``maintain``, not in ``recover``: by then a standby's or the
        archive's hold on older segments is in place (``Log.retention_hold``). The snapshot
        directory is synced first: a kill between the rename and its directory's fsync leaves a
        snapshot that recovery reads but a power cut could still take back. Once per start, on
        the loop thread (a directory fsync, and unlinks only after such a crash)."""
        self.log.fs.fsync_dir(self.snap_dir)
        self.log.retain(self._kept_from)

    def snapshot(self, engine: Engine) -> None:
        """Take a complete snapshot now (shutdown, tests); finishes one already in progress."""
        if self._snap is None:
            self._begin(engine)
        s = self._snap
        assert s is not None
        if s.thread is None:
            while s.pos < len(s.jobs):
                self._copy_chunk(engine, s)
            self._complete(engine, s, inline=True)
        elif s.thread is not None:
            s.thread.join()
            self._snap = None
            if s.error is not None:
                self._snapshot_failed(s)
                raise WalError(f"{self.snap_dir}: snapshot failed: {s.error}") from s.error
            self._snapshot_done()

    def _begin(self, engine: Engine) -> None:
        if self.apply_pending is not None:  # a snapshot starts at the log's end: the engine must hold it all
            self.apply_pending()
        if engine.seq != self.last_seq:
            raise WalError(f"snapshot needs every record written first (engine seq {engine.seq}, "
                           f"WAL seq {self.last_seq})")  # fmt: skip
        engine.expire_results(engine.last_step_us)
        rewrite = sum(frame_size(RESULT_FIXED + len(body)) for _, _, body in engine.iter_results())
        if rewrite and not self.admit(rewrite):
            raise WalError(f"{self.snap_dir}: no room to write the {len(engine.results)} live results "
                           "again, which a snapshot must do before older WAL segments go")
        writer = SnapshotWriter(self.snap_dir, engine.seq, self.log.next_offset,
                                reserve=self._snapshot_reserve(), fs=self.log.fs, epochs=engine.epochs)  # fmt: skip
        self._snap = SnapInProgress(writer, self.log.next_offset, capture_order(engine), self._bytes_since_snapshot,
                                    self._kept_from)  # fmt: skip
        self._bytes_since_snapshot = 0
        self._kept_from = self.log.next_offset
        # Results are not snapshot entries: written again after the snapshot's start (in room
        # promised above), they stay in the WAL it keeps (durable before older segments go).
        self.write(engine.result_records())

    def _copy_chunk(self, engine: Engine, s: SnapInProgress) -> None:
        jobs, start = s.jobs, s.pos
        end = min(start + self.chunk_jobs, len(jobs))
        i = _chunk_end(jobs, start, end, self.chunk_bytes)
        s.pos = i
        live = _still_live(jobs[start:i], engine.jobs)
        try:
            s.writer.add_jobs(live, engine.seq)
        except BaseException:
            s.writer.abort()
            self._snap = None
            self._snapshot_failed(s)
            raise
        self.records_migrated += len(live)

    def _complete(self, engine: Engine, s: SnapInProgress, inline: bool = False) -> None:
        next_id, end_seq = engine.next_id, engine.seq
        if inline or not self.background:
            try:
                self._finalize(s, next_id, end_seq)
            except BaseException:
                self._snapshot_failed(s)
                raise
            finally:
                self._snap = None
            self._snapshot_done()
            return
        s.jobs = []

        def run() -> None:
            try:
                self._finalize(s, next_id, end_seq)
            except BaseException as exc:  # handed to the loop thread by maintain()
                s.error = exc

        s.thread = threading.Thread(target=run, name="stalkd-snapshot", daemon=True)
        s.thread.start()

    def _finalize(self, s: SnapInProgress, next_id: int, end_seq: int) -> None:
        # The WAL first, under every policy: everything below the snapshot's start, and the
        # results written again after it (see _begin), fsynced before the snapshot is renamed
        # into place. Under ``never`` (and between ``every:MS`` ticks) nothing else has synced
        # it, and a power cut after the rename left a log ending below the offset the snapshot
        # covers: recovery refuses that (records missing), as new records would reuse offsets
        # the snapshot already holds.
        try:
            self.log.sync()
            final = s.writer.finish(next_id, end_seq)
        except BaseException:
            s.writer.abort()
            raise
        self.snapshots_written += 1
        self.log.retain(s.start_offset)
        for old in list_snapshots(self.snap_dir):
            if old != final and os.path.basename(old) < os.path.basename(final):
                self.log.fs.unlink(old)
        self.log.fs.fsync_dir(self.snap_dir)
