"""The engine's write-ahead log: records into ``stalkd.log``, snapshots, compaction, recovery.

Directory layout: ``DIR/wal/`` is a ``stalkd.log`` (one frame per ``model`` record) and
``DIR/snapshots/`` holds ``snap-<seq>.snap`` files (``snapshot.py``).
``DIR/wal/spares/`` holds preallocated spare segments: room is promised (``admit``) before the
engine applies a change, so a full disk refuses puts but never a delete (``space.py``).

Compaction = snapshot + retention (``compaction.py``). When the WAL written since the last snapshot began exceeds
``max(compact_min_bytes, live bytes)``, ``maintain`` starts a snapshot: it notes the current seq
and log offset, then copies ``chunk_jobs`` jobs per call (so the event loop is never held for
long), and finally hands the file to a background thread that fsyncs it, renames it into place,
fsyncs the directory, drops (or archives) WAL segments wholly below the snapshot's start offset,
and deletes older snapshots. Disk use therefore stays near live data + one snapshot's worth of
WAL + a segment, however long jobs churn.

Ensures: at every instant (any crash point of the steps above) the directory holds either the
previous complete snapshot with all WAL segments it needs, or the new complete snapshot with all
WAL segments it needs; ``recover`` rebuilds exactly the durable state written before the crash
(docs/protocol.md, "Persistence": reserved jobs come back ready, delays keep their wall-clock deadline,
ids continue).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stalkd.engine.compaction import Compaction, SnapInProgress, WalError
from stalkd.engine.engine import Engine
from stalkd.engine.model import DURABLE_OPS, Op, Record, encode
from stalkd.engine.replay import finish
from stalkd.engine.snapshot import (
    SnapshotError,
    SnapshotHeader,
    list_snapshots,
    load_into,
    read_header,
    snapshot_gap,
)
from stalkd.engine.space import SHORT_FRAME, SpaceBudget, no_space, put_frame
from stalkd.engine.tail import TailError, replay_tail
from stalkd.log import Log, LogFullError
from stalkd.log.active import SPARES_DIR
from stalkd.log.frame import FRAME_HEADER_SIZE as _FRAME_HEADER
from stalkd.log.fs import REAL, FileSystem
from stalkd.log.segment import FOOTER_SIZE

__all__ = ["RecoveryInfo", "Wal", "WalError"]


LOG_DIR = "wal"
SNAP_DIR = "snapshots"
SPARE_FILE = "wal-spare"  # spare segments of earlier versions (now wal/spares/, space.py)
SNAP_RESERVE = "reserve.spare"  # in snapshots/: room for a snapshot on a full disk
_log = logging.getLogger("stalkd.engine.wal")
_PUT = Op.PUT
_RESULT = Op.RESULT


@dataclass(frozen=True, slots=True)
class RecoveryInfo:
    """What ``recover`` did: ``jobs`` live jobs; ``records_replayed`` WAL records applied after the
    snapshot (``snapshot`` path or None); ``discarded`` incomplete snapshot files removed."""

    jobs: int
    snapshot: str | None
    snapshot_jobs: int
    records_replayed: int
    seconds: float
    discarded: tuple[str, ...]
    snapshot_seconds: float = 0.0  # part of ``seconds`` spent loading the snapshot


class Wal(Compaction):
    """Persistence for one engine.

    >>> import tempfile
    >>> from stalkd.protocol.commands import Put
    >>> d = tempfile.mkdtemp()
    >>> with Wal.open(d, durability="never") as wal:
    ...     eng, info = wal.recover(now=100.0)
    ...     eng.connect(1, 100.0)
    ...     out = eng.apply(1, Put(0, 0, 60, b"x"), 100.0)
    ...     wal.write(out.records); wal.sync()
    >>> with Wal.open(d, durability="never") as wal:
    ...     eng, info = wal.recover(now=101.0)
    >>> sorted(eng.jobs), info.records_replayed
    ([1], 1)
    """

    persistent = True  # the server's Storage: records survive a restart

    def __init__(
        self,
        directory: str,
        log: Log,
        durability: str,
        segment_size: int,
        compact_min_bytes: int,
        chunk_jobs: int,
        background: bool,
    ) -> None:
        self.directory = directory
        self.snap_dir = os.path.join(directory, SNAP_DIR)
        self.log = log
        self.fs = log.fs
        self.durability = durability
        self.segment_size = segment_size
        self.compact_min_bytes = compact_min_bytes
        self.chunk_jobs = chunk_jobs
        self.background = background
        self.last_seq = 0
        self.records_written = 0
        self.records_migrated = 0
        self.snapshots_written = 0
        self._bytes_since_snapshot = 0
        self._snap: SnapInProgress | None = None
        self._recovered = False
        self.space: SpaceBudget | None = None  # made by recover (needs the max job size)
        self._limit_base = -1
        self._limit = 0
        self.repair = False  # set by open(repair=True): cut damage instead of refusing
        self.archive = False  # set by open(archive=...): retired segments go to wal/archive/
        self.repair_notes: list[str] = []  # what a repair did, for the operator

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        durability: str = "always",
        segment_size: int = 4 * 2**20,
        archive: bool = False,
        compact_min_bytes: int | None = None,
        chunk_jobs: int = 1024,
        background: bool = True,
        repair: bool = False,
        fs: FileSystem = REAL,
    ) -> Wal:
        """Open (creating) the WAL in ``directory``; call ``recover`` next.

        ``durability`` is the log policy (``always``, ``every:<ms>``, ``never``). Segments are
        4 MiB by default (the log's own default is 64 MiB): recovery reads the WAL from the
        snapshot's start offset, and the log finds that offset by scanning its segment from the
        first frame, so a smaller segment bounds that scan (~20k frames) on every restart. ``archive`` moves retired segments to ``wal/archive/``.
        ``repair`` cuts a damaged log at its damage (bytes kept in ``wal/dropped/``) and lets
        ``recover`` continue from a snapshot the log no longer reaches, instead of refusing.
        ``fs`` is the file system every file goes through (tests inject faults, and crash
        points, with a ``Faults``); a data directory holding a symbolic link is refused.
        """
        d = os.fspath(directory)
        fs.makedirs(d)
        fs.check_no_symlinks(d)
        fs.makedirs(os.path.join(d, SNAP_DIR))
        fs.check_no_symlinks(os.path.join(d, SNAP_DIR))
        log = Log.open(os.path.join(d, LOG_DIR), segment_size=segment_size,
                       durability=durability, archive=archive, repair=repair, fs=fs)  # fmt: skip
        wal = cls(d, log, durability, segment_size,
                  segment_size if compact_min_bytes is None else compact_min_bytes,
                  chunk_jobs, background)  # fmt: skip
        wal.repair = repair
        wal.archive = archive
        rep = log.repair_report
        if rep is not None:
            wal.repair_notes.append(
                f"{rep.path}: log cut at byte {rep.position} (offset {rep.offset}): {rep.reason}; "
                + (f"dropped bytes kept in {', '.join(rep.dropped_files)}" if rep.dropped_files
                   else "no bytes to keep")  # fmt: skip
            )
        return wal

    def __enter__(self) -> Wal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- recovery -----------------------------------------------------------------------------

    def reopen(self) -> None:
        """Close the log and open the directory's again, whose files were replaced meanwhile
        (a standby's resync swaps in a copy of its primary's); call ``recover`` next."""
        self.close()
        self.log = Log.open(os.path.join(self.directory, LOG_DIR), segment_size=self.segment_size,
                            durability=self.durability, archive=self.archive, fs=self.fs)  # fmt: skip
        self.space = None
        self._recovered = False
        self._limit_base = -1
        self._bytes_since_snapshot = 0
        self.last_seq = 0

    def recover(self, now: float, *, max_job_size: int = 65535,
                into: Engine | None = None) -> tuple[Engine, RecoveryInfo]:
        """Rebuild the engine: newest complete snapshot, then every later WAL record (``into``:
        an empty engine to rebuild, rather than a new one)."""
        t0 = time.perf_counter()
        discarded = []
        for name in os.listdir(self.snap_dir):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(self.snap_dir, name))
                discarded.append(name)
        header: SnapshotHeader | None = None
        for path in list_snapshots(self.snap_dir):
            try:
                header = read_header(path)
                break
            except SnapshotError:
                discarded.append(path)  # kept on disk for a human; an older snapshot may serve
        bounds = self.log.segment_bounds()
        oldest = bounds[0][0] if bounds else 0
        need = header.start_offset if header else 0
        gap = snapshot_gap(header, oldest, self.log.next_offset, self.log.path)
        resnapshot = False
        if gap is not None and oldest > need:
            raise WalError(f"{gap}; restore the missing snapshot or segments (see discarded: "
                           + ", ".join(discarded) + ")")  # fmt: skip
        if gap is not None:
            if not self.repair:
                raise WalError(f"{gap}. To continue from the snapshot (the missing records are lost), run: "
                               f"stalkd log repair {self.directory}   (or start the server with --repair)")  # fmt: skip
            resnapshot = True  # the snapshot holds the jobs; a new one starts at the log's end
            self.repair_notes.append(f"{gap}; continuing from the snapshot, re-taken at offset "
                                     f"{self.log.next_offset}")  # fmt: skip
        # A million new objects would trigger full collections over a heap that only grows here;
        # the collector stays off for the rebuild, then everything recovered is frozen out of
        # its sight (it lives until deleted), so later collections do not walk it either.
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            e, replayed, t_snap = self._rebuild(header, need, now, max_job_size, into)
            gc.freeze()
        finally:
            if gc_was_on:
                gc.enable()
        self.last_seq = e.seq
        self._recovered = True
        self._open_space(len(e.jobs), max_job_size)
        self._keep_snapshot_reserve()
        if resnapshot:
            self.snapshot(e)
        info = RecoveryInfo(len(e.jobs), header.path if header else None, header.count if header else 0,
                            replayed, time.perf_counter() - t0, tuple(discarded), t_snap)  # fmt: skip
        return e, info

    def _rebuild(
        self, header: SnapshotHeader | None, need: int, now: float, max_job_size: int, into: Engine | None
    ) -> tuple[Engine, int, float]:
        e = Engine(max_job_size=max_job_size) if into is None else into
        fresh: dict[int, int] = {}
        start_seq = 0
        t_snap = time.perf_counter()
        if header is not None:
            try:
                fresh = load_into(e, header)
            except SnapshotError as exc:
                raise WalError(f"{exc}; move the file away to fall back to an older snapshot") from exc
            start_seq = header.start_seq
            e.seq = max(e.seq, header.end_seq)
            e.next_id = max(e.next_id, header.next_id)
        t_snap = time.perf_counter() - t_snap
        try:
            replayed = replay_tail(e, self.log.read(need), start_seq, fresh)
        except TailError as exc:
            raise WalError(f"{self.log.path}: {exc}") from exc
        finish(e)
        e.tick(now)
        while e.behind():  # nobody to serve yet: every job due at start-up moves now
            e.tick(now)
        return e, replayed, t_snap

    # --- space ------------------------------------------------------------------------------

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
        sp = SpaceBudget(self.log.path, self.segment_size, waste,
                         self.log.position_of_end, self._active_limit, self.fs)  # fmt: skip
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

    def _active_limit(self, base: int) -> int:
        if base != self._limit_base:
            path = self.log.segment_bounds()[-1][2]
            self._limit = os.stat(path).st_size - FOOTER_SIZE
            self._limit_base = base
        return self._limit

    def admit(self, cost: int) -> bool:
        """Promise room for ``cost`` bytes of records before the engine runs a command; False:
        the disk is full, refuse the command (nothing was changed or promised).

        True without a budget (before ``recover``)."""
        sp = self.space
        return sp is None or sp.admit(cost)

    def admit_upto(self, n: int, unit: int) -> int:
        """Promise room for as many of ``n`` records of ``unit`` bytes as fit; returns how many."""
        sp = self.space
        if sp is None or n <= 0 or sp.admit(n * unit):
            return max(n, 0)
        k = max(0, (sp.room() - sp.promised) // unit)
        return k if k and sp.admit(k * unit) else 0

    def settle(self, admitted: int, records: Sequence[Record]) -> None:
        """After the engine ran a command ``admit`` let through: promise exactly what its
        records need (returns what a refused put did not use)."""
        if self.space is not None:
            self.space.settle(admitted, records)

    # --- writing ------------------------------------------------------------------------------

    def write(self, records: Iterable[Record]) -> None:
        """Write records now (no fsync), in seq order. Call on the loop thread after each step.

        Analytics records (reserve, touch, timeout, pause) that would eat into room promised
        to others are left out (counted in ``binlog-records-dropped``) rather than fail."""
        recs = records if isinstance(records, (list, tuple)) else list(records)
        if not recs:
            return
        # One pass per record: its payload, its frame's size, and what the budget spends on it.
        payloads = []
        sizes = []
        spent = extra = total = 0
        for r in recs:
            p = encode(r)
            payloads.append(p)
            n = (_FRAME_HEADER + len(p) + 7) & ~7  # frame_size, inlined: once per record
            sizes.append(n)
            total += n
            op = r.op
            if op is _PUT or op is _RESULT:
                spent += n
            elif op in DURABLE_OPS:
                spent += SHORT_FRAME
            else:
                extra += n
        sp = self.space
        if sp is not None:
            if extra and not sp.fits(extra):
                keep = [i for i, r in enumerate(recs) if r.op in DURABLE_OPS]
                sp.dropped += len(recs) - len(keep)
                payloads = [payloads[i] for i in keep]
                sizes = [sizes[i] for i in keep]
                total = sum(sizes)
            if payloads:
                sp.before_write(sizes, total)
        if payloads:
            self._write_payloads(payloads)
            if sp is not None:
                sp.written(spent)
        self.records_written += len(payloads)
        self._bytes_since_snapshot += total
        self.last_seq = recs[-1].seq

    def _write_payloads(self, payloads: list[bytes]) -> None:
        while True:
            try:
                self.log.write_many(payloads)
                return
            except LogFullError:
                # No spare of the right size was left (an oversize segment): free one, retry.
                if self.space is None or not self.space.release(1):
                    raise

    def append_replicated(self, first: int, payloads: list[bytes]) -> None:
        """A standby's write: the primary's record payloads at offsets ``first``... exactly
        (nothing left out, unlike ``write``: offsets must stay the primary's). No fsync."""
        if first != self.log.next_offset:
            raise WalError(f"{self.log.path}: replicated records start at offset {first}, the log at "
                           f"{self.log.next_offset}")  # fmt: skip
        sizes = [(_FRAME_HEADER + len(p) + 7) & ~7 for p in payloads]
        if self.space is not None:
            self.space.before_write(sizes, sum(sizes))
        self._write_payloads(payloads)
        self.records_written += len(payloads)
        self._bytes_since_snapshot += sum(sizes)

    def sync(self) -> None:
        """Make everything written durable under the policy (thread-safe; group commit)."""
        if self.durability == "always":
            self.log.sync()

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

    def _keep_snapshot_reserve(self) -> None:
        """Preallocate the room a snapshot needs when the disk is full (a quarter segment,
        4 KiB to 4 MiB: when the dead WAL fills the disk, the live jobs are few). Best effort:
        without room now, the next completed snapshot tries again."""
        path = os.path.join(self.snap_dir, SNAP_RESERVE)
        if os.path.exists(path):
            return
        size = min(4 * 2**20, max(4096, self.segment_size // 4))
        tmp = path + ".tmp"  # recovery deletes a .tmp left in the snapshot directory
        fs = self.fs
        fd = fs.open(tmp, os.O_WRONLY, create=True, truncate=True)
        try:
            fs.allocate(fd, 0, size)
            fs.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                fs.unlink(tmp)
            if not no_space(e):
                raise
        finally:
            os.close(fd)

    def maintain(self, engine: Engine, now: float, *, force: bool = False) -> bool:
        """``Compaction.maintain``; when a snapshot fails for lack of space, the spare segments no
        promise needs are given back first, so the retry finds room (the snapshot is what frees
        the dead WAL)."""
        try:
            return super().maintain(engine, now, force=force)
        except (OSError, WalError) as e:
            if self.space is not None and no_space(e):
                self.space.short = True
                freed = self.space.release_unpromised()
                if freed:
                    _log.info("%s: gave back %d spare segments so a snapshot can free the dead WAL",
                              self.directory, freed)  # fmt: skip
            raise

    def final_snapshot(self, engine: Engine) -> str | None:
        """At a clean stop: a snapshot if WAL was written since the last one, so the next start
        loads it instead of replaying dead records. Returns None on success, else why not (the
        WAL stays complete either way)."""
        if self._snap is None and self._bytes_since_snapshot == 0:
            return None
        try:
            self.snapshot(engine)
        except (OSError, WalError) as e:
            return str(e)
        return None

    # --- status -------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """beanstalkd's binlog-* stats. Indexes are segment base offsets (stalkd has no file numbers)."""
        bounds = self.log.segment_bounds()
        return {
            "binlog-oldest-index": bounds[0][0] if bounds else 0,
            "binlog-current-index": bounds[-1][0] if bounds else 0,
            "binlog-records-migrated": self.records_migrated,
            "binlog-records-written": self.records_written,
            "binlog-max-size": self.segment_size,
            "binlog-spare-segments": self.space.spares if self.space else 0,
            "binlog-puts-refused": self.space.refused if self.space else 0,
            "binlog-records-dropped": self.space.dropped if self.space else 0,
        }

    def disk_bytes(self) -> int:
        """Bytes allocated on disk by the WAL segments, snapshots and spare segments (archive
        excluded)."""
        total = 0
        for root in (self.log.path, os.path.join(self.log.path, SPARES_DIR), self.snap_dir):
            try:
                names = os.listdir(root)
            except FileNotFoundError:
                continue
            for name in names:
                # a background snapshot may delete files between listdir and stat
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(os.path.join(root, name))
                    if stat.S_ISREG(st.st_mode):
                        total += st.st_blocks * 512
        return total

    def close(self) -> None:
        """Wait for a background snapshot, drop an unfinished one, close the log."""
        s = self._snap
        if s is not None:
            if s.thread is not None:
                s.thread.join()
            else:
                s.writer.abort()
            self._snap = None
        if self.space is not None:
            self.space.close()
        self.log.close()

    def abandon(self) -> None:
        """Release files without finishing anything (what a crash leaves; tests only)."""
        s = self._snap
        if s is not None and s.thread is None and s.writer._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(s.writer._fd)
        self._snap = None
        self.log.abandon()
