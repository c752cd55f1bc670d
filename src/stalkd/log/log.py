"""The log: one writer process appends, with group commit, recovery, groups and retention.

``Log`` is the facade over collaborators, one concern each: ``recovery`` (what is on disk
when it opens), ``writer`` (frames into segments, roll-over), ``commit`` (group commit, the
durable end, tickets, waiters), ``group`` (consumer groups) and ``retention``.

Ensures:
  * offsets are dense and monotonic: the n-th record ever appended has offset n, across segments;
  * with ``always``, ``append``/``append_many`` return (and tickets resolve) only after an fsync
    covering the record; concurrent callers share fsyncs;
  * a refused append (full disk, lag limit) writes nothing that a later open could see;
  * after an fsync error the object refuses every further operation (the page cache may have
    dropped the data, so pretending otherwise would lie about durability);
  * on open, sealed segments are trusted through their footers and only the active segment is
    scanned; a torn or corrupt tail there is cut off, and the writer epoch is raised so stale
    bytes behind the cut can never come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from .active import SPARES_DIR, ZERO_AHEAD, ActiveSegment
from .columns import FrameColumns, segment_columns
from .commit import GroupCommit, parse_durability
from .errors import LogError
from .frame import FLAGS_AT, FRAME_HEADER_SIZE, KIND_DATA, KIND_MASK, LENGTH_AT, Frame
from .fs import REAL, FileSystem
from .lock import lock_dir, unlock_dir
from .mark import Mark, Marker
from .reader import (
    ARCHIVE_DIR,
    GROUPS_DIR,
    FrameSpan,
    ReadPos,
    SegmentViews,
    list_segments,
    read_columns,
    read_frames,
)
from .recovery import RepairReport, recover
from .retention import retain
from .segment import FOOTER_SIZE, HEADER_SIZE, ScanState
from .ticket import Ticket
from .writer import SegmentWriter

if TYPE_CHECKING:
    # Consumer groups (group, groupapi, grouplag, cursor) are imported where a log opens one or
    # finds one on disk: a server's WAL has none, and importing them takes ~1 ms of its start.
    from .cursor import CursorSyncer
    from .group import ConsumerGroup

__all__ = ["Log", "RepairReport", "frames_span", "parse_durability", "write_batch"]

_log = logging.getLogger("stalkd.log")
_U32 = struct.Struct("<I")
_SEGMENT_HEADER = HEADER_SIZE  # (compiled: a C constant for frames_span, not a global per use)

Payload = bytes | bytearray | memoryview


def write_batch(w: SegmentWriter, c: GroupCommit, items: Sequence[Payload],
                admit: Callable[[Sequence[Payload]], None] | None) -> tuple[int, int]:
    """``Log.write_many``'s steps after its checks, for callers holding the log's writer and
    group commit (``w``, ``c``: a WAL's per-batch path, persist/wal.py): write ``items`` (not
    empty), asking ``admit`` first (None: nothing to ask), run the callbacks a roll-over held
    back, wake readers waiting for records. Compiled, C calls on both objects."""
    first, last = w.write_many(items, admit)
    c.run_deferred()
    v = c.visibility  # (compiled: its C fields; a walrus here left Cython's C untyped)
    if v.waiters or v.async_waiters:
        v.notify()
    return first, last


@cython.locals(act=ActiveSegment, base=cython.Py_ssize_t, pos=cython.Py_ssize_t, offset=cython.Py_ssize_t,
               last=cython.Py_ssize_t, stop=cython.Py_ssize_t, end=cython.Py_ssize_t, limit=cython.Py_ssize_t,
               nxt=cython.Py_ssize_t)  # fmt: skip
def frames_span(w: SegmentWriter, views: SegmentViews, at: ReadPos, max_bytes: int, span: FrameSpan) -> bool:
    """``Log.frames_after``'s steps for callers holding the log's writer and mappings (``w``,
    ``views``: a standby's stream, per message): where the frames after ``at`` lie, into
    ``span`` (its ``mv`` is the mapping itself, no slice of it); False where ``frames_after``
    answers None. Compiled, C reads and calls and no object made."""
    act = w.active
    if act is None:
        return False
    base, pos, offset = at.base, at.pos, at.offset
    while True:
        if base == act.base:
            path, last, stop = act.path, w.next, act.pos
            break
        seg = None  # (loops, not generators: a compiled cpdef function has no closures)
        ended = False
        for s in w.bounds:
            if s[0] == base:
                seg = s
                break
            ended = ended or s[0] == offset
        if seg is None and ended:
            base, pos = offset, _SEGMENT_HEADER  # ``at`` ended a segment retention removed since
            continue
        if seg is None or seg[1] is None:
            return False
        path = seg[2]
        view = views.get(base, path, False)
        footer = view.footer if view.footer is not None else view.read_footer()
        if footer is None:
            return False
        last, stop = footer
        if offset < last:
            break
        base, pos = last, _SEGMENT_HEADER  # the next segment starts where this one ended
    if not _SEGMENT_HEADER <= pos <= stop or offset > last:
        return False
    mv = views.get(base, path, False).mv
    end = stop
    if stop - pos > max_bytes:
        end, limit = pos, pos + max_bytes
        while end < stop and offset < last:
            nxt = (end + FRAME_HEADER_SIZE + _U32.unpack_from(mv, end + LENGTH_AT)[0] + 7) & ~7
            if (nxt > limit and end > pos) or nxt > stop or mv[end + FLAGS_AT] & KIND_MASK != KIND_DATA:
                break
            end, offset = nxt, offset + 1
        last = offset
    span.base, span.start, span.end, span.stop, span.mv = base, pos, end, last, mv
    return True


class Log:
    """An append-only, segmented, CRC32C-checked log in a directory; one writer process.

    >>> import tempfile
    >>> with Log.open(tempfile.mkdtemp(), durability="never") as log:
    ...     log.append(b"hello"), log.append_many([b"a", b"b"])
    ...     [f.bytes() for f in log.read(0)]
    (0, (1, 2))
    [b'hello', b'a', b'b']
    """

    def __init__(self) -> None:  # use Log.open
        self.path = ""
        self.fs: FileSystem = REAL
        self.repair_report: RepairReport | None = None
        self._groups: dict[str, ConsumerGroup] = {}
        self._refusers: list[ConsumerGroup] = []  # groups whose lag limit refuses appends
        self._views = SegmentViews()
        self._cursor_syncer: CursorSyncer | None = None
        self._policy = "always"
        self._durability = "always"
        self._archive = False
        # An offset below which retention may drop segments, asked at each retain (e.g. what
        # stalkd.archive has shipped); None: no hold. Set by the owner after open.
        self.retention_hold: Callable[[], int] | None = None
        # Called after each roll-over seals a segment, under the writer's lock and on the writing
        # thread, so it may only schedule work (the server brings its WAL maintenance forward:
        # the files' bound holds only if compaction looks at least once per segment). Set by the
        # owner after open.
        self.on_sealed: Callable[[], object] | None = None
        self._lockfd: int | None = None
        self._mark: Mark | None = None
        self._marker: Marker | None = None
        self.created = False  # open found no segment: the log starts here
        self._commit: GroupCommit
        self._writer: SegmentWriter

    # ---------------------------------------------------------------- open

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        segment_size: int = 64 * 2**20,
        durability: str = "always",
        archive: bool = False,
        repair: bool = False,
        io: Literal["auto", "pwrite", "mmap"] = "auto",
        fs: FileSystem = REAL,
        clock: Callable[[], int] = time.time_ns,
        mark_interval: float | None = None,
    ) -> Log:
        """Open (creating if needed) the log in directory ``path`` for writing.

        ``durability``: ``always`` (fsync before returning; group commit), ``every:<ms>`` (a
        flush at most ``ms`` after a write), ``never`` (page cache: survives a process crash).
        ``repair=True`` truncates at the first bad frame anywhere instead of refusing to open.
        ``fs`` is the file system (tests pass a :class:`stalkd.log.fs.Faults`). A directory
        holding a symbolic link among its files is refused (:class:`stalkd.log.fs.SymlinkError`).
        ``clock`` (nanoseconds) stamps frames and segment headers (tests comparing bytes fix it).
        ``mark_interval`` (seconds): how often a thread raises the high-water mark to the durable
        end (``mark.py``); None: only at open, roll-over and retention.
        """
        if segment_size < HEADER_SIZE + FOOTER_SIZE + 64:
            raise ValueError(f"segment_size {segment_size} is too small (minimum {HEADER_SIZE + FOOTER_SIZE + 64})")
        if io not in ("auto", "pwrite", "mmap"):
            raise ValueError(f"io must be 'auto', 'pwrite' or 'mmap', not {io!r}")
        log = cls()
        log.path = os.fspath(path)
        policy, interval = parse_durability(durability)
        log._policy = policy
        log._durability = durability
        log._archive = archive
        log.fs = fs
        fs.makedirs(log.path)
        log._lockfd = lock_dir(fs, log.path)
        try:
            for sub in ("", GROUPS_DIR, ARCHIVE_DIR, SPARES_DIR):
                d = os.path.join(log.path, sub)
                fs.check_no_symlinks(d)
            rec = recover(log.path, repair, fs=fs)
            log.repair_report = rec.repair
            log.created = not rec.sealed and rec.active is None and rec.next_offset == 0
            log._commit = GroupCommit(log.path, policy, interval, rec.next_offset)
            log._writer = SegmentWriter(log.path, segment_size, io, policy != "never", fs,
                                        log._commit.fail, log._sealed,
                                        ZERO_AHEAD if policy == "always" else 0, clock)  # fmt: skip
            log._writer.resume(rec)
            # After the first segment exists: a mark without segments says a log was lost.
            mark = log._mark = Mark(log.path, fs)
            if mark.value != rec.next_offset:  # durable now: resume synced the active segment
                mark.write(rec.next_offset)
            log._load_groups()
        except BaseException:
            log._release_files()
            raise
        log._commit.start(log._writer)
        if mark_interval is not None:
            c = log._commit
            log._marker = Marker(mark, lambda: c.durable, mark_interval, log._mark_failed)
        return log

    def _sealed(self, end: int) -> None:
        """A roll-over sealed a segment (under the writer's lock): durable below ``end``."""
        self._commit.sealed(end)
        self._raise_mark(end)
        hook = self.on_sealed
        if hook is not None:
            hook()

    def _raise_mark(self, end: int) -> None:
        mark = self._mark
        if mark is not None:
            try:
                mark.advance(end)
            except OSError as e:  # the records are safe; only the mark is late (retried later)
                self._mark_failed(e)

    def _mark_failed(self, e: OSError) -> None:
        _log.warning("%s: could not write the high-water mark (%s); retried at the next roll-over or "
                     "interval", self.path, e)  # fmt: skip

    # ---------------------------------------------------------------- writing

    def append(self, payload: Payload) -> int:
        """Append one record; returns its offset once durable under the policy."""
        off = -1
        if self._commit.ok and not self._refusers:  # fast path: no lag limits to check
            off = self._writer.append(payload)
        if off < 0:
            off = self.write_many((payload,))[0]
        elif (v := self._commit.visibility).waiters or v.async_waiters:
            v.notify()
        if self._policy == "always":  # straight to the group commit, which checks failure itself
            self._commit.sync_to(off + 1)
        else:
            self._after_write(off + 1)
        return off

    def append_many(self, payloads: Iterable[Payload]) -> tuple[int, int]:
        """Append a batch (one write, one fsync); returns (first, last) once durable."""
        first, last = self.write_many(payloads)
        self._after_write(last + 1)
        return first, last

    def write_many(self, payloads: Iterable[Payload]) -> tuple[int, int]:
        """Write now without fsync; returns (first, last) offsets. For callers that group commits
        themselves (then call :meth:`sync`, possibly from another thread).

        An empty batch returns ``(next_offset, next_offset - 1)``.
        """
        items = payloads if isinstance(payloads, (list, tuple)) else list(payloads)
        if not items:
            self._check_usable()
            return self._writer.next, self._writer.next - 1
        c = cython.declare(GroupCommit, self._commit)
        # Usable and no lag limit to check (the common case): nothing for the writer to ask
        # under its lock. ``ok`` read unlocked, as ``append`` does: a failure that lands
        # meanwhile fails the next write or sync.
        return write_batch(self._writer, c, items, None if c.ok and not self._refusers else self._admit)

    def _admit(self, items: Sequence[Payload]) -> None:
        """Under the writer's lock, before a batch is written: refuse it if the log is unusable
        or a group's lag limit says so."""
        self._check_usable()
        for g in self._refusers:
            g.check_refuse(len(items), sum(len(p) for p in items))

    def _after_write(self, end: int) -> None:
        if self._policy == "always":
            self.sync_to(end)
        elif self._policy == "every":
            self._commit.wake_flusher()

    def submit(self, payloads: Iterable[Payload]) -> Ticket:
        """Write now (it survives kill -9 at once) and return a Ticket that resolves when durable
        (``ticket.wait()``, or ``await ticket``)."""
        first, last = self.write_many(payloads)
        return self._commit.ticket(first, last)

    def ticket(self) -> Ticket:
        """A Ticket that resolves once everything written so far (``write_many``'s included) is
        durable: under ``always`` the committer thread fsyncs for it, one fsync for every ticket
        then waiting, and its callbacks run on that thread."""
        end = self._writer.next
        return self._commit.ticket(end - 1, end - 1)

    # ---------------------------------------------------------------- durability

    def sync(self) -> int:
        """fsync everything written so far; returns the durable end offset. Thread-safe."""
        c = self._commit
        if c.failed is not None:
            self._check_usable(closing_ok=True)  # raises, saying how to recover
        return c.sync_to(None)

    def sync_to(self, upto: int | None) -> int:
        """Return once every offset below ``upto`` (None: everything written) is durable."""
        self._check_usable(closing_ok=True)
        return self._commit.sync_to(upto)

    @property
    def next_offset(self) -> int:
        """Offset the next append will get (= number of records ever written)."""
        return self._writer.next

    @property
    def durable_offset(self) -> int:
        """Every offset below this one is fsynced."""
        return self._commit.durable

    @property
    def syncs(self) -> int:
        """Group-commit fsyncs done since open (records per fsync shows how well concurrent
        ``always`` appenders share them)."""
        return self._commit.syncs

    @property
    def durability(self) -> str:
        """The policy string this log was opened with."""
        return self._durability

    def visible_end(self) -> int:
        """End of what consumers may see: durable records under ``always``, written ones otherwise."""
        return self._commit.durable if self._policy == "always" else self._writer.next

    def wait_visible(self, offset: int, timeout: float) -> bool:
        """Block until a record at or after ``offset`` is visible (woken by appends), the log
        closes, or ``timeout`` seconds pass; True if one is visible."""
        return self._commit.visibility.wait(offset, timeout, self.visible_end)

    def future_visible(self, offset: int) -> asyncio.Future[None]:
        """A future of the running event loop, done once a record at or after ``offset`` is
        visible (at once if one already is)."""
        return self._commit.visibility.future(offset, self.visible_end)

    # ---------------------------------------------------------------- reading

    def _listing(self) -> list[tuple[int, str, bool]]:
        return list_segments(self.path, archive=True)

    def read(
        self,
        start: int,
        end: int | None = None,
        *,
        resume: ReadPos | None = None,
        make: Callable[[int, int, memoryview], object] = Frame,
    ) -> Iterator[Frame]:
        """Frames with ``start <= offset < end`` (None: up to what is written now), zero-copy.

        Offsets already removed by retention are skipped (reading starts at the oldest kept).
        ``resume`` is a position hint, updated as frames are read (consumer groups keep one);
        ``make(offset, timestamp_us, payload)`` builds what is yielded instead of a Frame.
        """
        stop, segs = self._read_bounds(start, end)
        return read_frames(self._listing, self._views.get, start, stop, resume, make, segs)

    def read_columns(self, start: int, end: int | None = None, max_rows: int = 1 << 16) -> Iterator[FrameColumns]:
        """The frames ``read`` yields, as chunks of at most ``max_rows`` consecutive frames of
        one segment in columns (:mod:`stalkd.log.columns`: positions in the segment's mapping,
        no object per frame), for readers of every record such as recovery."""
        stop, segs = self._read_bounds(start, end)
        return read_columns(self._listing, self._views.get, start, stop, max_rows, segs)

    def _read_bounds(self, start: int, end: int | None) -> tuple[int, list[tuple[int, str, bool]] | None]:
        """Where a read from ``start`` stops (``end``, at most what is written now), and the
        segments it reads if the writer knows them."""
        self._check_usable()
        nxt = self._writer.next
        stop = nxt if end is None else min(end, nxt)
        bounds = self._writer.bounds
        # From the live segments on, the writer's own list stands for the directory's: a reader
        # that follows the end (a standby's stream, each batch) lists nothing.
        segs = [(b, p, False) for b, _, p in bounds] if bounds and start >= bounds[0][0] else None
        return stop, segs

    def frames_after(self, at: ReadPos, max_bytes: int) -> tuple[int, int, memoryview, int] | None:
        """The frames that follow ``at`` (a position a read left: offset ``at.offset`` is the
        frame at byte ``at.pos`` of the segment based at ``at.base``) as the writer laid them
        out, from one segment: ``(base, position, view, end offset)``, ``view`` a zero-copy
        slice of that segment's mapping from ``position`` holding the whole frames of offsets
        ``at.offset`` to ``end offset``, at most ``max_bytes`` of them unless one frame alone
        is larger. At the end of a sealed segment (or of one removed since) it continues in the
        next one. The rest of a
        segment is taken without looking at its frames; a longer run is cut at a frame
        boundary found from the frames' lengths. None when ``at`` is in no live segment (the
        caller reads frame by frame). Unchecked: whoever consumes the bytes checks the frames'
        CRCs. The view is of this log's mapping: drop it before retention may run (the same
        turn of the caller)."""
        span = FrameSpan()  # the steps are frames_span's, written once
        if not frames_span(self._writer, self._views, at, max_bytes, span):
            return None
        mv = span.mv
        assert mv is not None
        return span.base, span.start, mv[span.start : span.end], span.stop

    def segment_bounds(self) -> list[tuple[int, int | None, str]]:
        """(base, end or None for the active one, path) of the live segments, oldest first."""
        return list(self._writer.bounds)

    def active_span(self) -> tuple[int, int, int]:
        """The active segment's (base offset, byte position where the next frame goes, last
        byte frames may use): the room a write fits in without starting a segment."""
        act = self._writer.active
        if act is None:
            raise LogError(f"{self.path}: log is closed")
        return act.base, act.pos, act.limit

    def bytes_from(self, offset: int) -> int:
        """Bytes of the frames from ``offset`` to the end written: what reading from there
        reads (the engine's WAL since its snapshot). Scans the segment holding ``offset`` up to it.

        >>> import tempfile
        >>> with Log.open(tempfile.mkdtemp(), durability="never") as log:
        ...     _ = log.append_many([b"a" * 8, b"b" * 8, b"c" * 8])
        ...     log.bytes_from(0), log.bytes_from(2), log.bytes_from(3)
        (96, 32, 0)
        """
        w = self._writer
        act = w.active
        if act is None:
            raise LogError(f"{self.path}: log is closed")
        if offset >= w.next:  # (a snapshot at the end: no scan of the active segment up to it)
            return 0
        total = 0
        for base, end, path in w.bounds:
            if end is not None and end <= offset:
                continue
            view = self._views.get(base, path, False)
            if end is None:
                stop = act.pos
            else:
                footer = view.footer or view.read_footer()
                stop = footer[1] if footer is not None else view.size - FOOTER_SIZE
            start = HEADER_SIZE
            if base < offset:
                # Walked (and checked) by the column scan, which lists nothing before ``offset``.
                st = ScanState(HEADER_SIZE, base)
                for _ in segment_columns(view, offset, offset, offset - base, st):
                    pass
                start = st.pos
            total += max(0, stop - start)
        return total

    def position_of_end(self) -> tuple[int, int]:
        """(active segment base, byte position) where the next frame goes."""
        act = self._writer.active
        if act is None:
            raise LogError(f"{self.path}: log is closed")
        return act.base, act.pos

    # ---------------------------------------------------------------- groups and retention

    def group(
        self,
        name: str,
        *,
        durability: str | None = None,
        ttl: float | None = None,
        max_lag_items: int | None = None,
        max_lag_bytes: int | None = None,
        overflow: Literal["drop", "refuse"] = "drop",
        max_attempts: int | None = None,
        dead_letter: Log | None = None,
    ) -> ConsumerGroup:
        """The named consumer group, created on first use; its cursor file survives crashes.

        ``durability`` of its checkpoints defaults to the log's. The policies given here replace
        the group's previous ones (they are not persisted: pass them on every open).
        """
        self._check_usable()
        policies = dict(durability=durability, ttl=ttl, max_lag_items=max_lag_items, max_lag_bytes=max_lag_bytes,
                        overflow=overflow, max_attempts=max_attempts, dead_letter=dead_letter)  # fmt: skip
        g = self._groups.get(name)
        if g is None:
            from .group import ConsumerGroup

            g = self._groups[name] = ConsumerGroup(self, name, **policies)  # type: ignore[arg-type]
        else:
            g.configure(**policies)  # type: ignore[arg-type]
        with self._writer.lock:
            self._refusers = [
                x for x in self._groups.values()
                if x.overflow == "refuse" and (x.max_lag_items is not None or x.max_lag_bytes is not None)
            ]
            self._writer.refusing = bool(self._refusers)
        return g

    def _load_groups(self) -> None:
        gdir = os.path.join(self.path, GROUPS_DIR)
        if not os.path.isdir(gdir):
            return
        from .group import ConsumerGroup

        for name in sorted(os.listdir(gdir)):
            if name.endswith(".cur"):
                gname = name[:-4]
                self._groups[gname] = ConsumerGroup(self, gname)

    def remove_group(self, name: str) -> None:
        """Forget a consumer group and delete its cursor file, so it no longer holds back retention."""
        self._check_usable()
        g = self._groups.pop(name, None)
        if g is None:
            raise LogError(f"{self.path}: no consumer group {name!r}")
        g.destroy()
        with self._writer.lock:
            self._refusers = [x for x in self._refusers if x is not g]
            self._writer.refusing = bool(self._refusers)

    def groups(self) -> dict[str, ConsumerGroup]:
        """Every group known to this log (opened, or found on disk), by name."""
        return dict(self._groups)

    def cursor_syncer(self) -> CursorSyncer:
        """The thread that fsyncs the cursors of this log's ``every:<ms>`` groups (started on first use)."""
        if self._cursor_syncer is None:
            from .cursor import CursorSyncer

            self._cursor_syncer = CursorSyncer()
        return self._cursor_syncer

    def retain(self, floor: int) -> list[str]:
        """Delete (or archive) sealed segments wholly below ``floor`` and every group's cursor.

        Returns the paths removed or moved. The active segment is never removed. (The engine's
        WAL calls it with its snapshot's start offset: everything before it may go.)
        """
        self._check_usable()
        self._raise_mark(self._commit.durable)
        if self.retention_hold is not None:
            floor = min(floor, self.retention_hold())
        return retain(self._writer, floor, self._groups.values(), self._archive, self._views.forget)

    # ---------------------------------------------------------------- lifecycle

    def _check_usable(self, closing_ok: bool = False) -> None:
        c = self._commit
        if c.failed is not None:
            raise LogError(
                f"{self.path}: log failed ({c.failed}); records from offset {c.durable} on may "
                "not be on disk; close it and reopen to recover"
            )
        if c.closed and not closing_ok:
            raise LogError(f"{self.path}: log is closed")

    def close(self) -> None:
        """Flush (unless ``never``), persist group cursors, release files and the lock."""
        c = getattr(self, "_commit", None)
        if c is None or c.closed:
            return
        if c.failed is None and self._policy != "never" and self._writer.next > c.durable:
            with contextlib.suppress(LogError):
                self.sync()
        c.close()
        for g in self._groups.values():
            with contextlib.suppress(LogError, OSError):
                g.close()
        if self._cursor_syncer is not None:
            self._cursor_syncer.close()
        self._release_files()

    def abandon(self) -> None:
        """Drop every file and the lock without flushing or checkpointing: what a crash leaves
        (crash tests). Background threads see the log closed and stop."""
        for g in self._groups.values():
            g.abandon()
        self._release_files()

    def _release_files(self) -> None:
        marker, self._marker = self._marker, None
        if marker is not None:
            marker.stop()
        mark, self._mark = self._mark, None
        if mark is not None:
            mark.close()
        c = getattr(self, "_commit", None)
        if c is not None:
            c.release()
        self._views.close()
        w = getattr(self, "_writer", None)
        if w is not None:
            w.close()
        fd, self._lockfd = self._lockfd, None
        if fd is not None:
            unlock_dir(fd)

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = getattr(self, "_commit", None)
        durable = c.durable if c is not None else 0
        return f"Log({self.path!r}, next={self.next_offset}, durable={durable}, {self._durability})"

