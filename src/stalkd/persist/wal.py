"""The engine's write-ahead log: records into ``stalkd.log``, snapshots, compaction, recovery.

Directory layout: ``DIR/wal/`` is a ``stalkd.log`` (one frame per ``model`` record) and
``DIR/snapshots/`` holds ``snap-<seq>.snap`` files (``snapshot.py``).
``DIR/wal/spares/`` holds preallocated spare segments: room is promised (``admit``) before the
engine applies a change, so a full disk refuses puts but never a delete (``space.py``).

Compaction = snapshot + retention (``compaction.py``). When the WAL written since the last snapshot began exceeds
``max(compact_min_bytes, live bytes / 2)``, or the segment files kept for it would pass 2 x live bytes + 2 segments
at the next segment (``compaction.snapshot_due``), ``maintain`` starts a snapshot: it notes the current seq
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
import logging
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from stalkd.engine.engine import Engine
from stalkd.engine.model import DURABLE_OPS, ROWS, OpLayout, Record, encode
from stalkd.engine.space import SpaceBudget, no_space, spent
from stalkd.log import Log, LogFullError
from stalkd.log.active import SPARES_DIR
from stalkd.log.commit import GroupCommit
from stalkd.log.frame import frame_size, frames_size
from stalkd.log.fs import REAL, FileSystem
from stalkd.log.log import write_batch
from stalkd.log.repairs import restart_at
from stalkd.log.writer import SegmentWriter
from stalkd.persist.compaction import Compaction, SnapInProgress, WalError, live_bytes
from stalkd.persist.idceiling import IdCeiling
from stalkd.persist.walrecovery import RecoveryInfo, rebuild
from stalkd.persist.walspace import SNAP_RESERVE, WalSpace

__all__ = ["RecoveryInfo", "Wal", "WalBatches", "WalError"]

LOG_DIR = "wal"
SNAP_DIR = "snapshots"
_log = logging.getLogger("stalkd.persist.wal")
NO_CEILING = 2**62  # above every job id (the last epoch's band ends at 2**53): never reached
# How often the log's high-water mark follows the durable end (stalkd.log.mark): damage to what
# was acknowledged before the last mark is refused at the next start, later damage reads as a
# torn tail. One small fdatasync per interval while writes happen, none per write.
MARK_INTERVAL = 0.1


def _log_existed(directory: str) -> str | None:
    """What in a data directory whose log had no segment says one existed (the snapshot reserve,
    a snapshot: both are made after the first segment), or None."""
    snaps = os.path.join(directory, SNAP_DIR)
    try:
        names = sorted(os.listdir(snaps))
    except FileNotFoundError:
        return None
    for name in names:
        if name == SNAP_RESERVE or name.endswith(".snap"):
            return f"{SNAP_DIR}/{name}"
    return None


def _durable_only(recs: Sequence[Record], payloads: list[bytes]) -> tuple[list[bytes], int]:
    """The payloads of ``recs``' durable records (the analytics ones left out) and their frames'
    size."""
    kept = [p for r, p in zip(recs, payloads, strict=True) if r.op in DURABLE_OPS]
    return kept, sum(frame_size(len(p)) for p in kept)


@cython.cclass
class WalBatches:
    """What ``Wal`` does per command and per batch, and the state those steps read: the room
    promised (``admit``, ``settle``), the records written (``write``), the counters they move.

    ``Wal`` is a plain class (its steps are mixins: walspace.py, compaction.py); compiled, this
    is an extension type whose fields are C fields and whose steps call the log's writer, its
    group commit and the space budget as C functions (wal.pxd), where ``Wal``'s own attributes
    are dictionary look-ups (callgrind, a put at depth 1 under ``never``: ``Wal.write`` spent
    ~3,700 instructions on its attributes besides the encoder and the log, ``Log.write_many``
    ~1,900 on its own). ``Wal`` keeps the same state as properties over this object, and the
    server's admission and barriers call it directly (``Wal.batches``).
    """

    log: Log
    writer: SegmentWriter
    commit: GroupCommit
    always: bool
    space: SpaceBudget | None
    id_ceiling: int
    records_written: int
    bytes_since_snapshot: int
    last_seq: int
    cover_id: Callable[[int], None]  # a new id past the ceiling: raise it first (Wal._cover_id)
    retry_full: Callable[[list[bytes], LogFullError], None]  # the log refused a batch for room

    def __init__(self, log: Log, always: bool, cover_id: Callable[[int], None],
                 retry_full: Callable[[list[bytes], LogFullError], None]) -> None:  # fmt: skip
        self.use_log(log)
        self.always = always  # the durability policy is ``always``: ``sync`` fsyncs
        self.space = None
        self.id_ceiling = NO_CEILING
        self.records_written = 0
        self.bytes_since_snapshot = 0
        self.last_seq = 0
        self.cover_id = cover_id
        self.retry_full = retry_full

    def use_log(self, log: Log) -> None:
        """Write into ``log`` from now on (an open log; ``Wal`` reopens its directory's)."""
        self.log = log
        self.writer = log._writer
        self.commit = log._commit

    def admit(self, cost: int) -> bool:
        """Promise room for ``cost`` bytes of records before the engine runs a command; False:
        the disk is full, refuse the command (nothing was changed or promised).

        True without a budget (before ``recover``)."""
        sp = cython.declare(SpaceBudget, self.space)  # compiled: its C attributes and methods
        return sp is None or sp.admit(cost)

    def admit_upto(self, n: int, unit: int) -> int:
        """Promise room for as many of ``n`` records of ``unit`` bytes as fit; returns how many."""
        sp = cython.declare(SpaceBudget, self.space)
        if sp is None or n <= 0 or sp.admit(n * unit):
            return max(n, 0)
        k = max(0, (sp.room() - sp.promised) // unit)
        return k if k and sp.admit(k * unit) else 0

    def settle(self, admitted: int, records: Sequence[Record]) -> None:
        """After the engine ran a command ``admit`` let through: promise exactly what its
        records need (returns what a refused put did not use)."""
        sp = cython.declare(SpaceBudget, self.space)
        if sp is not None:
            sp.settle(admitted, records)

    @cython.locals(spent_room=cython.Py_ssize_t, extra=cython.Py_ssize_t, total=cython.Py_ssize_t,
                   n=cython.Py_ssize_t, ceiling=cython.Py_ssize_t)  # fmt: skip
    def write(self, records: Iterable[Record]) -> None:
        """``Wal.write``."""
        recs = records if isinstance(records, (list, tuple)) else list(records)
        if not recs:
            return
        # One pass per record: its payload, its frame's size, and what the budget spends on it
        # (durable records spend promised room, the others only what nobody was promised).
        payloads = []
        spent_room = extra = total = 0
        ceiling = self.id_ceiling
        for r in recs:
            p = encode(r)
            rec = cython.declare(Record, r)  # compiled: its C fields
            row = cython.declare(OpLayout, ROWS[rec.op])  # (encode refused an op without a row)
            if row.creates and rec.job_id >= ceiling:  # a new id past the durable ceiling: raise it first
                self.cover_id(rec.job_id)
                ceiling = self.id_ceiling
            payloads.append(p)
            n = frame_size(len(p))
            total += n
            if row.durable:
                spent_room += spent(row, n)
            else:
                extra += n
        sp = cython.declare(SpaceBudget, self.space)
        if sp is not None and extra and not sp.fits(extra):
            payloads, total = _durable_only(recs, payloads)
            sp.dropped += len(recs) - len(payloads)
        if payloads:
            self.write_payloads(payloads)
            if sp is not None:
                sp.written(spent_room)
        self.records_written += len(payloads)
        self.bytes_since_snapshot += total
        self.last_seq = rec.seq  # (the last record's: recs is not empty)

    def sync(self) -> None:
        """``Wal.sync``: under ``always``, everything written is durable when it returns
        (``Log.sync``; thread-safe, group commit); nothing to do under the other policies."""
        if self.always:
            c = self.commit
            if c.failed is None:
                c.sync_to(None)
            else:
                self.log.sync()  # raises, saying how to recover

    def append_replicated(self, first: int, payloads: list[bytes]) -> None:
        """``Wal.append_replicated``: a standby's per-message write (compiled, a C call from the
        receiver: the offset check, the frames' size and the counters as C reads, where ``Wal``'s
        took ~9,000 instructions a message, a generator and its properties among them)."""
        w = self.writer
        if first != w.next:
            raise WalError(f"{self.log.path}: replicated records start at offset {first}, the log at "
                           f"{w.next}")  # fmt: skip
        total = frames_size(payloads)
        self.write_payloads(payloads)
        self.records_written += len(payloads)
        self.bytes_since_snapshot += total

    def write_payloads(self, payloads: list[bytes]) -> None:
        """Record payloads into the log, as ``Log.write_many`` writes them; a log refusing them
        for room (an oversize segment without a spare) is retried (``retry_full``)."""
        log = self.log
        c = self.commit
        try:
            write_batch(self.writer, c, payloads, None if c.ok and not self.writer.refusing else log._admit)
        except LogFullError as e:
            self.retry_full(payloads, e)


class Wal(WalSpace, Compaction):
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
        self.log = log  # (replaced by _use_log only: ``batches`` writes into it too)
        # The per-command and per-batch state and steps (``space`` and the counters below are
        # its fields, through the properties after ``__init__``).
        self.batches = WalBatches(log, durability == "always", self._cover_id, self._retry_full)
        self.fs = log.fs
        self.durability = durability
        self.segment_size = segment_size
        self.compact_min_bytes = compact_min_bytes
        self.chunk_jobs = chunk_jobs
        self.background = background
        self.records_migrated = 0
        self.snapshots_written = 0
        self._kept_from = 0
        self._retain_owed = False
        self._snap: SnapInProgress | None = None
        self._recovered = False
        self.repair = False  # set by open(repair=True): cut damage instead of refusing
        self.archive = False  # set by open(archive=...): retired segments go to wal/archive/
        self.repair_notes: list[str] = []  # what a repair did, for the operator
        # every id handed out is below ``id_ceiling`` (idceiling.py); none to keep under ``always``
        self._ids: IdCeiling | None = None
        self._on_sealed: Callable[[], object] | None = None
        # A standby's: applies the records appended to this log and not yet to the engine
        # (``replication.receiver``), before a snapshot pairs the log's end with the engine.
        self.apply_pending: Callable[[], object] | None = None

    def _use_log(self, log: Log) -> None:
        """Write into ``log`` from now on (the directory's, opened again)."""
        self.log = log
        self.batches.use_log(log)

    # The state ``WalBatches`` keeps: ``space`` is made by recover (it needs the max job size).

    @property
    def space(self) -> SpaceBudget | None:
        return self.batches.space

    @space.setter
    def space(self, space: SpaceBudget | None) -> None:
        self.batches.space = space

    @property
    def id_ceiling(self) -> int:
        return self.batches.id_ceiling

    @id_ceiling.setter
    def id_ceiling(self, value: int) -> None:
        self.batches.id_ceiling = value

    @property
    def records_written(self) -> int:
        return self.batches.records_written

    @records_written.setter
    def records_written(self, value: int) -> None:
        self.batches.records_written = value

    @property
    def _bytes_since_snapshot(self) -> int:
        return self.batches.bytes_since_snapshot

    @_bytes_since_snapshot.setter
    def _bytes_since_snapshot(self, value: int) -> None:
        self.batches.bytes_since_snapshot = value

    @property
    def last_seq(self) -> int:
        return self.batches.last_seq

    @last_seq.setter
    def last_seq(self, value: int) -> None:
        self.batches.last_seq = value

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
        clock: Callable[[], int] = time.time_ns,
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
        ``clock`` (nanoseconds) stamps the log's frames (the log's own, ``Log.open``).
        """
        d = os.fspath(directory)
        fs.makedirs(d)
        fs.check_no_symlinks(d)
        fs.makedirs(os.path.join(d, SNAP_DIR))
        fs.check_no_symlinks(os.path.join(d, SNAP_DIR))
        log = Log.open(os.path.join(d, LOG_DIR), segment_size=segment_size, durability=durability,
                       archive=archive, repair=repair, fs=fs, clock=clock, mark_interval=MARK_INTERVAL)  # fmt: skip
        if log.created and not repair:
            why = _log_existed(d)
            if why is not None:
                log.close()
                raise WalError(f"{log.path}: no WAL segment file, yet {why} says this data directory held a "
                               f"log: its records are lost. To start from what remains (the snapshot, if "
                               f"any), run: stalkd log repair {d}   (or start the server with --repair)")  # fmt: skip
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
        self._use_log(self._open_log_again())
        self.space = None
        self._recovered = False
        self._bytes_since_snapshot = 0
        self._kept_from = 0
        self._retain_owed = False
        self.last_seq = 0

    def on_segment(self, hook: Callable[[], object] | None) -> None:
        """Call ``hook`` each time the log seals a segment (on the writing thread, under the
        log's lock: it may only schedule work), through reopens too."""
        self._on_sealed = self.log.on_sealed = hook

    def _open_log_again(self) -> Log:
        log = Log.open(os.path.join(self.directory, LOG_DIR), segment_size=self.segment_size,
                       durability=self.durability, archive=self.archive, fs=self.fs,
                       clock=self.log._writer.clock, mark_interval=MARK_INTERVAL)  # fmt: skip
        log.on_sealed = self._on_sealed
        return log

    def recover(self, now: float, *, max_job_size: int = 65535,
                into: Engine | None = None) -> tuple[Engine, RecoveryInfo]:
        """Rebuild the engine: newest complete snapshot, then every later WAL record (``into``:
        an empty engine to rebuild, rather than a new one)."""
        t0 = time.perf_counter()
        r = rebuild(self.directory, self.snap_dir, self.log, now, max_job_size=max_job_size,
                    into=into, repair=self.repair)  # fmt: skip
        if r.note is not None:
            self.repair_notes.append(r.note)
        if r.restart_at is not None:  # a repair: the snapshot holds everything the log still had
            files = [path for _, _, path in self.log.segment_bounds()]
            self.log.close()
            restart_at(self.fs, self.log.path, files, r.restart_at, self.segment_size)
            self._use_log(self._open_log_again())
        e = r.engine
        if self.durability != "always":
            self._keep_id_ceiling(e)
        self.last_seq = e.seq
        self._recovered = True
        self._live_bytes = lambda: live_bytes(e)
        self._open_space(len(e.jobs), max_job_size)
        self._keep_snapshot_reserve()
        # The WAL since the snapshot counts towards the next one whichever process wrote it: a
        # server killed again and again before it wrote a snapshot's worth still compacts.
        h = r.header
        self._bytes_since_snapshot = self.log.bytes_from(h.start_offset if h else 0)
        self._kept_from = start = h.start_offset if h else 0
        # A kill between a snapshot's rename and its retention leaves segments below its start:
        # the first maintain drops them (Compaction._retain_recovered).
        self._retain_owed = any(end is not None and end <= start for _, end, _ in self.log.segment_bounds())
        info = RecoveryInfo(len(e.jobs), h.path if h else None, h.count if h else 0, r.replayed,
                            time.perf_counter() - t0, r.discarded, r.snapshot_seconds,
                            h.start_offset if h else 0)  # fmt: skip
        return e, info

    def _keep_id_ceiling(self, e: Engine) -> None:
        """Ids start at the ceiling when the log ends below it (puts acknowledged from the page
        cache that a power cut took: their ids are not given again)."""
        if self._ids is None:
            self._ids = IdCeiling(self.directory, self.fs)
        ceiling = self._ids.value
        if ceiling > e.next_id:
            _log.info("job ids continue from %d, not %d: ids up to the durable ceiling may have "
                      "been handed out before an unclean stop (under %s) and are not reused",
                      ceiling, e.next_id, self.durability)  # fmt: skip
            e.next_id = ceiling
        self.id_ceiling = ceiling

    def _cover_id(self, job_id: int) -> None:
        ids = self._ids
        assert ids is not None  # a ceiling below NO_CEILING is only ever read from its file
        ids.cover(job_id)
        self.id_ceiling = ids.value

    # --- space (the room-keeping steps are WalSpace's) ---------------------------------------

    def admit(self, cost: int) -> bool:
        """``WalBatches.admit``."""
        return self.batches.admit(cost)

    def admit_upto(self, n: int, unit: int) -> int:
        """``WalBatches.admit_upto``."""
        return self.batches.admit_upto(n, unit)

    def settle(self, admitted: int, records: Sequence[Record]) -> None:
        """``WalBatches.settle``."""
        self.batches.settle(admitted, records)

    # --- writing ------------------------------------------------------------------------------

    def write(self, records: Iterable[Record]) -> None:
        """Write records now (no fsync), in seq order. Call on the loop thread after each step.

        Analytics records (reserve, touch, timeout, pause) that would eat into room promised
        to others are left out (counted in ``binlog-records-dropped``) rather than fail."""
        self.batches.write(records)

    def _write_payloads(self, payloads: list[bytes]) -> None:
        self.batches.write_payloads(payloads)

    def _retry_full(self, payloads: list[bytes], e: LogFullError) -> None:
        """The log refused ``payloads`` with ``e``: no spare of the right size was left (an
        oversize segment). Free a spare and retry while there is one to free."""
        while self.space is not None and self.space.release(1):
            try:
                self.log.write_many(payloads)
                return
            except LogFullError as again:
                e = again
        raise e

    def append_replicated(self, first: int, payloads: list[bytes]) -> None:
        """A standby's write: the primary's record payloads at offsets ``first``... exactly
        (nothing left out, unlike ``write``: offsets must stay the primary's). No fsync."""
        self.batches.append_replicated(first, payloads)

    def sync(self) -> None:
        """Make everything written durable under the policy (thread-safe; group commit)."""
        self.batches.sync()

    def maintain(self, engine: Engine, now: float, *, force: bool = False) -> bool:
        """``Compaction.maintain``; a snapshot that fails for lack of space leaves the next one
        room (``_out_of_room``): the snapshot is what frees the dead WAL."""
        try:
            return super().maintain(engine, now, force=force)
        except (OSError, WalError) as e:
            self._out_of_room(e)
            raise

    def _out_of_room(self, e: BaseException) -> bool:
        """Whether a snapshot failed for lack of space; if so, puts count as refused (the next
        snapshot writes into the reserve) and the spare segments no promise needs are given back."""
        space = self.space
        if space is None or not no_space(e):
            return False
        space.short = True
        freed = space.release_unpromised()
        if freed:
            _log.info("%s: gave back %d spare segments so a snapshot can free the dead WAL",
                      self.directory, freed)  # fmt: skip
        return True

    def final_snapshot(self, engine: Engine) -> str | None:
        """At a clean stop: a snapshot if WAL was written since the last one, so the next start
        loads it instead of replaying dead records. Returns None on success, else why not (the
        WAL stays complete either way)."""
        if self._snap is None and self._bytes_since_snapshot == 0:
            self._settle_ids(engine)
            return None
        try:
            self._snapshot_of_now(engine)
        except (OSError, WalError) as e:
            # A full disk with no put refused since the last snapshot: the reserve was not yet
            # the snapshot's to use. There is no later tick to try again at a stop: once more now.
            reserve_unused = self.space is not None and not self.space.short
            if not (reserve_unused and self._out_of_room(e)):
                return str(e)
            try:
                self._snapshot_of_now(engine)
            except (OSError, WalError) as e2:
                return str(e2)
        self._settle_ids(engine)
        return None

    def _snapshot_of_now(self, engine: Engine) -> None:
        """A snapshot of the engine as it is: ``snapshot`` first finishes one in progress, begun
        before the WAL written since (the next start would replay that), so then one more."""
        self.snapshot(engine)
        if self._bytes_since_snapshot:
            self.snapshot(engine)

    def _settle_ids(self, engine: Engine) -> None:
        """Everything is durable at a clean stop: the ceiling comes down to the next id, so the
        next start goes on from there without a gap."""
        if self._ids is not None and self._ids.value > engine.next_id:
            try:
                self._ids.settle(engine.next_id)
            except OSError as e:  # the higher ceiling stays: a gap, never a reuse
                _log.warning("could not lower the job id ceiling at stop: %s", e)

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
        if self._ids is not None:
            self._ids.close()
        self.log.close()

    def abandon(self) -> None:
        """Release files without finishing anything (what a crash leaves; tests only)."""
        s = self._snap
        if s is not None and s.thread is None and s.writer._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(s.writer._fd)
        self._snap = None
        if self._ids is not None:
            self._ids.close()
        self.log.abandon()

