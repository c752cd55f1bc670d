"""The log writer: one process appends, with group commit, recovery and space reservation.

Ensures:
  * offsets are dense and monotonic: the n-th record ever appended has offset n, across segments;
  * with ``always``, ``append``/``append_many`` return (and tickets resolve) only after an fsync
    covering the record; concurrent callers share fsyncs (one leader at a time commits
    everything written so far, the others find their records already durable);
  * a refused append (full disk, lag limit) writes nothing that a later open could see;
  * after an fsync error the object refuses every further operation (the page cache may have
    dropped the data, so pretending otherwise would lie about durability);
  * on open, sealed segments are trusted through their footers and only the active segment is
    scanned; a torn or corrupt tail there is cut off, and the writer epoch is raised so stale
    bytes behind the cut can never come back.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal

from crc32c import crc32c

from .active import ActiveSegment, _allocate, create_segment, fsync_dir, write_footer
from .cursor import CursorSyncer
from .errors import LogError, LogFullError, LogLockedError
from .frame import (
    FLAG_COMMITTED,
    FRAME_HEADER_SIZE,
    KIND_DATA,
    MAGIC,
    MAX_PAYLOAD,
    REST,
    Frame,
    frame_size,
)
from .reader import ARCHIVE_DIR, ReadPos, list_segments, read_frames
from .recovery import RepairReport, recover
from .segment import (
    FOOTER_SIZE,
    HEADER_SIZE,
    MAX_EPOCH,
    SegmentView,
    encode_footer,
    encode_header,
)
from .ticket import Ticket

if TYPE_CHECKING:
    from .group import ConsumerGroup

__all__ = ["Log", "RepairReport", "parse_durability"]

_DATA_FLAGS = FLAG_COMMITTED | KIND_DATA
_pack_rest = REST.pack
_pack_u32 = struct.Struct("<I").pack
_PADS = tuple(bytes(i) for i in range(8))
LOCK_NAME = "LOCK"
GROUPS_DIR = "groups"


def parse_durability(spec: str) -> tuple[str, float]:
    """("always"|"every"|"never", interval in seconds) from a policy string.

    >>> parse_durability("every:5")
    ('every', 0.005)
    """
    if spec in ("always", "never"):
        return spec, 0.0
    if spec.startswith("every:"):
        try:
            ms = float(spec[6:])
        except ValueError:
            ms = -1.0
        if ms > 0:
            return "every", ms / 1000.0
    raise ValueError(f"durability must be 'always', 'never' or 'every:<ms>' (ms > 0), not {spec!r}")


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
        self.repair_report: RepairReport | None = None
        self._groups: dict[str, ConsumerGroup] = {}
        self._views: dict[str, SegmentView] = {}
        self._sealed: list[tuple[int, int, str]] = []  # (base, end_offset, path) of live sealed segments
        self._tickets: deque[Ticket] = deque()
        self._failed: BaseException | None = None
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._wlock = threading.Lock()  # order of writes and the active segment
        self._syncing = False  # a leader is fsyncing (group commit; guarded by _cond)
        self._cursor_syncer: CursorSyncer | None = None
        self._deferred: list[tuple[Ticket, Callable[[Ticket], object]]] = []
        self._fdlock = threading.Lock()  # retiring a segment fd while a sync uses it
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # durable progress, appends, tickets
        # The committer/flusher thread waits here, on the same lock: notifying ``_cond`` at
        # every sync woke it for nothing (two futex wake-ups and a GIL fight per sync).
        self._bg_cond = threading.Condition(lock)
        self._waiters = 0
        self._async_waiters: list[tuple[object, object]] = []
        self._refusers: list[ConsumerGroup] = []
        self._last_sync = time.monotonic()
        self._flush_due = False
        self._segment_size = 64 * 2**20
        self._policy = "always"
        self._interval = 0.0
        self._durability = "always"
        self._archive = False
        # An offset below which retention may drop segments, asked at each retain (e.g. what
        # stalkd.archive has shipped); None: no hold. Set by the owner after open.
        self.retention_hold: Callable[[], int] | None = None
        self._io = "auto"
        self._next = 0
        self._durable = 0
        self._lockfd: int | None = None
        self._active: ActiveSegment  # set by open

    # ---------------------------------------------------------------- open / recovery

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
    ) -> Log:
        """Open (creating if needed) the log in directory ``path`` for writing.

        ``durability``: ``always`` (fsync before returning; group commit), ``every:<ms>`` (a
        flush at most ``ms`` after a write), ``never`` (page cache: survives a process crash).
        ``repair=True`` truncates at the first bad frame anywhere instead of refusing to open.
        """
        if segment_size < HEADER_SIZE + FOOTER_SIZE + 64:
            raise ValueError(f"segment_size {segment_size} is too small (minimum {HEADER_SIZE + FOOTER_SIZE + 64})")
        log = cls()
        log.path = os.fspath(path)
        log._segment_size = segment_size
        log._policy, log._interval = parse_durability(durability)
        log._durability = durability
        log._archive = archive
        if io not in ("auto", "pwrite", "mmap"):
            raise ValueError(f"io must be 'auto', 'pwrite' or 'mmap', not {io!r}")
        log._io = io
        os.makedirs(log.path, exist_ok=True)
        log._lock_dir()
        try:
            log._recover(repair)
            log._load_groups()
        except BaseException:
            log._release_files()
            raise
        if log._policy == "always":
            log._start_thread(log._committer, "stalkd-log-commit")
        elif log._policy == "every":
            log._start_thread(log._flusher, "stalkd-log-flush")
        return log

    def _lock_dir(self) -> None:
        fd = os.open(os.path.join(self.path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LogLockedError(
                f"{self.path}: log is already open for writing (lock held by pid {holder}); "
                "one writer per directory, readers use LogReader"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lockfd = fd

    def _recover(self, repair: bool) -> None:
        rec = recover(self.path, repair)
        self.repair_report = rec.repair
        self._sealed = list(rec.sealed)
        self._next = self._durable = rec.next_offset
        if rec.active is None:
            self._active = self._create_segment(rec.next_offset, self._segment_size, epoch=1)
            return
        path, base, pos, epoch = rec.active
        fd = os.open(path, os.O_RDWR)
        size = os.fstat(fd).st_size
        if pos + FOOTER_SIZE > size:  # a file cut short (not by us: we preallocate): room for the footer
            size = max(self._segment_size, pos + FOOTER_SIZE)
            try:
                _allocate(fd, size)
            except OSError as e:
                os.close(fd)
                raise LogFullError(f"{path}: cannot restore the room of a truncated segment: {e}") from e
        if epoch >= MAX_EPOCH:  # epochs exhausted: seal this one and start afresh
            self._write_footer_fd(fd, size, base, rec.next_offset, pos, epoch)
            os.close(fd)
            self._sealed.append((base, rec.next_offset, path))
            self._active = self._create_segment(rec.next_offset, self._segment_size, epoch=1)
            return
        # Raise the epoch before writing anything: frames left past the cut carry an older
        # epoch, and a scan rejects them once a newer frame precedes them.
        try:
            os.pwrite(fd, encode_header(base, epoch + 1, time.time_ns() // 1000), 0)
            os.fdatasync(fd)
        except OSError:
            os.close(fd)
            raise
        self._active = ActiveSegment(path, fd, base, pos, size, epoch + 1, self._io)

    # ---------------------------------------------------------------- segments

    def _create_segment(self, base: int, size: int, epoch: int) -> ActiveSegment:
        return create_segment(self.path, base, size, epoch, self._io, fsync=self._policy != "never")

    @staticmethod
    def _write_footer_fd(fd: int, size: int, base: int, end: int, data_end: int, epoch: int) -> None:
        write_footer(fd, size, base, end, data_end, epoch)

    def _seal(self, old: ActiveSegment, new: ActiveSegment) -> None:
        """Footer on ``old`` (fsynced, whatever the policy: it orders the roll-over), then switch."""
        end = new.base
        if old.mm is not None:
            old.mm[old.size - FOOTER_SIZE : old.size] = encode_footer(old.base, end, old.pos, old.epoch)
            os.fdatasync(old.fd)
        else:
            self._write_footer_fd(old.fd, old.size, old.base, end, old.pos, old.epoch)
        self._sealed.append((old.base, end, old.path))
        self._active = new
        with self._fdlock:
            old.retired = True
            if old.users == 0:
                old.close()
        with self._cond:
            # Ticket callbacks run after the write lock is released (they may append again).
            self._deferred.extend(self._advance_durable_locked(end))

    def _run_deferred(self) -> None:
        with self._cond:
            todo, self._deferred = self._deferred, []
        for t, fn in todo:
            fn(t)

    # ---------------------------------------------------------------- writing

    def write_many(self, payloads: Iterable[bytes | bytearray | memoryview]) -> tuple[int, int]:
        """Write now without fsync; returns (first, last) offsets. For callers that group commits
        themselves (then call :meth:`sync`, possibly from another thread).

        An empty batch returns ``(next_offset, next_offset - 1)``.

        >>> # first, last = log.write_many(records)   # on the event loop
        >>> # durable_end = log.sync()                 # in a worker thread, covers them
        """
        items = payloads if isinstance(payloads, (list, tuple)) else list(payloads)
        with self._wlock:
            self._check_usable()
            first = self._next
            if not items:
                return first, first - 1
            if self._refusers:
                self._check_lag(len(items), sum(len(p) for p in items))
            act = self._active
            if max(map(len, items)) > MAX_PAYLOAD:
                raise ValueError(f"{self.path}: a payload is larger than {MAX_PAYLOAD} bytes, the frame limit")
            total = 0
            for p in items:
                total += (FRAME_HEADER_SIZE + len(p) + 7) & ~7
            if act.pos + total <= act.limit:
                data = self._encode(items, first, act.base, act.epoch)
                self._write_checked(act, data, act.pos)
                act.pos += len(data)
                self._next = first + len(items)
            else:
                self._write_rolling(items)
            last = self._next - 1
        if self._deferred:
            self._run_deferred()
        if self._waiters or self._async_waiters:
            self._notify_append()
        return first, last

    @staticmethod
    def _encode(items: Sequence[bytes | bytearray | memoryview], offset: int, base: int, epoch: int) -> bytes:
        pack = REST.pack
        u32 = _pack_u32
        crc = crc32c
        pads = _PADS
        ts = time.time_ns() // 1000
        parts: list[bytes | bytearray | memoryview] = []
        extend = parts.extend
        delta = offset - base
        for p in items:
            n = len(p)
            rest = pack(MAGIC, _DATA_FLAGS, epoch, n, delta, ts)
            padn = -(FRAME_HEADER_SIZE + n) & 7
            if padn:
                pad = pads[padn]
                extend((u32(crc(pad, crc(p, crc(rest)))), rest, p, pad))
            else:
                extend((u32(crc(p, crc(rest))), rest, p))
            delta += 1
        return b"".join(parts)

    def _write_rolling(self, items: Sequence[bytes | bytearray | memoryview]) -> None:
        """A batch that crosses segment ends: allocate every segment it needs first, so a full
        disk refuses the whole batch before any of it is written."""
        plan: list[tuple[ActiveSegment, int, int]] = []  # (segment, first item, end item)
        act = self._active
        pos, start, created = act.pos, 0, []
        cur = act
        offset = self._next
        try:
            for i, p in enumerate(items):
                need = frame_size(len(p))
                if pos + need > cur.limit:
                    plan.append((cur, start, i))
                    size = max(self._segment_size, HEADER_SIZE + need + FOOTER_SIZE)
                    cur = self._create_segment(offset + i, size, epoch=1)
                    created.append(cur)
                    pos, start = HEADER_SIZE, i
                pos += need
            plan.append((cur, start, len(items)))
        except BaseException:
            for seg in created:
                seg.close()
                with contextlib.suppress(OSError):
                    os.unlink(seg.path)
            raise
        for k, (seg, lo, hi) in enumerate(plan):
            if lo < hi:
                data = self._encode(items[lo:hi], offset + lo, seg.base, seg.epoch)
                self._write_checked(seg, data, seg.pos)
                seg.pos += len(data)
            self._next = offset + hi
            if k + 1 < len(plan):
                self._seal(seg, plan[k + 1][0])

    def _write_checked(self, seg: ActiveSegment, data: bytes, pos: int) -> None:
        try:
            seg.write(data, pos)
        except OSError as e:
            # Zero what may have landed, so a crash cannot make the refused frames reappear.
            try:
                seg.write(bytes(len(data)), pos)
            except OSError as e2:
                self._fail(e2)
                raise LogError(f"{seg.path}: write failed at byte {pos} and could not be undone: {e2}") from e
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise LogFullError(f"{seg.path}: no space writing at byte {pos}: {e.strerror}") from e
            raise LogError(f"{seg.path}: write failed at byte {pos}: {e}") from e

    def append(self, payload: bytes | bytearray | memoryview) -> int:
        """Append one record; returns its offset once durable under the policy.

        >>> # off = log.append(b"job")
        """
        n = len(payload)
        size = (FRAME_HEADER_SIZE + n + 7) & ~7
        off = -1
        with self._wlock:
            # Fast path (the common case): room in the active segment, no lag limits to check.
            act = self._active
            if act is not None and act.pos + size <= act.limit and self._failed is None and not self._closed and not self._refusers:
                pos = act.pos
                off = self._next
                rest = _pack_rest(MAGIC, _DATA_FLAGS, act.epoch, n, off - act.base, time.time_ns() // 1000)
                pad = _PADS[size - FRAME_HEADER_SIZE - n]
                c = crc32c(payload, crc32c(rest))
                frame = b"".join((_pack_u32(crc32c(pad, c) if pad else c), rest, payload, pad))
                mm = act.mm
                if mm is not None:
                    mm[pos : pos + size] = frame  # no system call: measured faster for single frames
                else:
                    self._write_checked(act, frame, pos)
                act.pos = pos + size
                self._next = off + 1
        if off < 0:
            off = self.write_many((payload,))[0]
        elif self._waiters or self._async_waiters:
            self._notify_append()
        self._after_write(off + 1)
        return off

    def append_many(self, payloads: Iterable[bytes | bytearray | memoryview]) -> tuple[int, int]:
        """Append a batch (one write, one fsync); returns (first, last) once durable."""
        first, last = self.write_many(payloads)
        self._after_write(last + 1)
        return first, last

    def _after_write(self, end: int) -> None:
        if self._policy == "always":
            self._sync_to(end)
        elif self._policy == "every" and not self._flush_due and time.monotonic() - self._last_sync >= self._interval:
            # Wake the flusher now rather than at its next timed wake-up: a thread sleeping on a
            # timer is starved by a busy writer (GIL switch interval), one notified is not, since
            # every append releases the GIL in its write system call.
            with self._cond:
                self._flush_due = True
                self._bg_cond.notify()

    def submit(self, payloads: Iterable[bytes | bytearray | memoryview]) -> Ticket:
        """Write now (it survives kill -9 at once) and return a Ticket that resolves when durable.

        >>> # ticket = log.submit([b"a"]); await ticket   (or ticket.wait())
        """
        first, last = self.write_many(payloads)
        if self._policy != "always":
            return Ticket(first, last, self._cond, done=True)
        with self._cond:
            t = Ticket(first, last, self._cond, done=self._durable > last)
            if not t._done:
                self._tickets.append(t)
                self._bg_cond.notify()
        return t

    # ---------------------------------------------------------------- durability

    def sync(self) -> int:
        """fsync everything written so far; returns the durable end offset. Thread-safe.

        >>> # log.write_many([b"a"]); assert log.sync() >= 1
        """
        return self._sync_to(None)

    def _sync_to(self, upto: int | None) -> int:
        """Group commit: one caller at a time fsyncs everything written so far (the leader);
        the others wait on the condition and return as soon as the durable end covers them."""
        self._check_usable(closing_ok=True)
        with self._cond:
            if upto is None:
                upto = self._next
            while True:
                if self._durable >= upto:
                    return self._durable
                if self._failed is not None:
                    raise LogError(f"{self.path}: log failed earlier ({self._failed})")
                if not self._syncing:
                    self._syncing = True
                    break
                self._cond.wait()
        target = -1
        try:
            with self._wlock:
                target = self._next
                seg = self._active
                if seg is None:  # files already released (close, or a simulated crash)
                    raise LogError(f"{self.path}: log is closed")
                with self._fdlock:
                    seg.users += 1
            try:
                os.fdatasync(seg.fd)
                self._last_sync = time.monotonic()
            except OSError as e:
                target = -1
                self._fail(e)
                raise LogError(
                    f"{self.path}: fsync of {seg.path} failed ({e}); the log is now failed: records from "
                    f"offset {self._durable} on may be lost; reopen it to recover what is on disk"
                ) from e
            finally:
                with self._fdlock:
                    seg.users -= 1
                    if seg.retired and seg.users == 0:
                        seg.close()
        finally:
            with self._cond:
                self._syncing = False
                callbacks = self._advance_durable_locked(target) if target >= 0 else []
                self._cond.notify_all()
        for t, fn in callbacks:
            fn(t)
        return self._durable

    def _advance_durable_locked(self, target: int) -> list[tuple[Ticket, Callable[[Ticket], object]]]:
        out: list[tuple[Ticket, Callable[[Ticket], object]]] = []
        if target > self._durable:
            self._durable = target
            while self._tickets and self._tickets[0].last < target:
                t = self._tickets.popleft()
                out.extend((t, fn) for fn in t._resolve(None))
            self._cond.notify_all()
            if self._async_waiters:
                self._wake_async()
        return out

    def _fail(self, exc: BaseException) -> None:
        callbacks: list[tuple[Ticket, Callable[[Ticket], object]]] = []
        with self._cond:
            if self._failed is None:
                self._failed = exc
            err = LogError(f"{self.path}: log failed: {exc}")
            while self._tickets:
                t = self._tickets.popleft()
                callbacks.extend((t, fn) for fn in t._resolve(err))
            self._cond.notify_all()
        for t, fn in callbacks:
            fn(t)

    def _committer(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._tickets:
                    self._bg_cond.wait()
                if not self._tickets:
                    return
            try:
                self.sync()
            except LogError:
                return

    def _flusher(self) -> None:
        while True:
            with self._cond:
                if not self._flush_due:
                    self._bg_cond.wait(self._interval)
                if self._closed:
                    return
                self._flush_due = False
            if self._next > self._durable:
                try:
                    self.sync()
                except LogError:
                    return

    def _start_thread(self, target: Callable[[], None], name: str) -> None:
        th = threading.Thread(target=target, name=name, daemon=True)
        th.start()
        self._threads.append(th)

    # ---------------------------------------------------------------- reading

    @property
    def next_offset(self) -> int:
        """Offset the next append will get (= number of records ever written)."""
        return self._next

    @property
    def durable_offset(self) -> int:
        """Every offset below this one is fsynced."""
        return self._durable

    @property
    def durability(self) -> str:
        """The policy string this log was opened with."""
        return self._durability

    def visible_end(self) -> int:
        """End of what consumers may see: durable records under ``always``, written ones otherwise."""
        return self._durable if self._policy == "always" else self._next

    def _view(self, base: int, path: str, archived: bool) -> SegmentView:
        view = self._views.get(path)
        if view is None:
            view = SegmentView(path, archived)
            self._views[path] = view
        return view

    def _listing(self) -> list[tuple[int, str, bool]]:
        return list_segments(self.path, archive=True)

    def read(
        self,
        start: int,
        end: int | None = None,
        *,
        _resume: ReadPos | None = None,
        _make: Callable[[int, int, memoryview], object] = Frame,
    ) -> Iterator[Frame]:
        """Frames with ``start <= offset < end`` (None: up to what is written now), zero-copy.

        Offsets already removed by retention are skipped (reading starts at the oldest kept).
        """
        self._check_usable()
        stop = self._next if end is None else min(end, self._next)
        return read_frames(self._listing, self._view, start, stop, _resume, _make)

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
        from .group import ConsumerGroup

        self._check_usable()
        g = self._groups.get(name)
        if g is None:
            g = ConsumerGroup(self, name, durability=durability, ttl=ttl, max_lag_items=max_lag_items,
                              max_lag_bytes=max_lag_bytes, overflow=overflow, max_attempts=max_attempts,
                              dead_letter=dead_letter)
            self._groups[name] = g
        else:
            g.configure(durability=durability, ttl=ttl, max_lag_items=max_lag_items,
                        max_lag_bytes=max_lag_bytes, overflow=overflow, max_attempts=max_attempts,
                        dead_letter=dead_letter)
        with self._wlock:
            self._refusers = [
                x for x in self._groups.values()
                if x.overflow == "refuse" and (x.max_lag_items is not None or x.max_lag_bytes is not None)
            ]
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
        g._file.close()
        os.unlink(g._file.path)
        fsync_dir(os.path.join(self.path, GROUPS_DIR))
        with self._wlock:
            self._refusers = [x for x in self._refusers if x is not g]

    def _cursor_syncer_for(self) -> CursorSyncer:
        if self._cursor_syncer is None:
            self._cursor_syncer = CursorSyncer()
        return self._cursor_syncer

    def groups(self) -> dict[str, ConsumerGroup]:
        """Every group known to this log (opened, or found on disk), by name."""
        return dict(self._groups)

    def _check_lag(self, n_items: int, n_bytes: int) -> None:
        for g in self._refusers:
            g._check_refuse(n_items, n_bytes)

    def segment_bounds(self) -> list[tuple[int, int | None, str]]:
        """(base, end or None for the active one, path) of the live segments, oldest first."""
        with self._wlock:
            out: list[tuple[int, int | None, str]] = [(b, e, p) for b, e, p in self._sealed]
            out.append((self._active.base, None, self._active.path))
            return out

    def position_of_end(self) -> tuple[int, int]:
        """(active segment base, byte position) where the next frame goes."""
        return self._active.base, self._active.pos

    def retain(self, floor: int) -> list[str]:
        """Delete (or archive) sealed segments wholly below ``floor`` and every group's cursor.

        Returns the paths removed or moved. The active segment is never removed.

        >>> # log.retain(snapshot_offset)   # the WAL: everything before the snapshot may go
        """
        self._check_usable()
        bound = floor
        for g in self._groups.values():
            g._enforce_lag()
            bound = min(bound, g.committed)
        if self.retention_hold is not None:
            bound = min(bound, self.retention_hold())
        with self._wlock:
            doomed = [s for s in self._sealed if s[1] <= bound]
            self._sealed = [s for s in self._sealed if s[1] > bound]
        out = []
        if doomed and self._archive:
            os.makedirs(os.path.join(self.path, ARCHIVE_DIR), exist_ok=True)
        for _base, _end, p in doomed:
            view = self._views.pop(p, None)
            if view is not None:
                view.close()
            if self._archive:
                target = os.path.join(self.path, ARCHIVE_DIR, os.path.basename(p))
                os.replace(p, target)
                out.append(target)
            else:
                os.unlink(p)
                out.append(p)
        if doomed:
            if self._archive:
                fsync_dir(os.path.join(self.path, ARCHIVE_DIR))
            fsync_dir(self.path)
        return out

    # ---------------------------------------------------------------- waiting for appends

    def _notify_append(self) -> None:
        with self._cond:
            self._cond.notify_all()
            if self._async_waiters:
                self._wake_async()

    def _wake_async(self) -> None:
        waiters, self._async_waiters = self._async_waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_set_future, fut)  # type: ignore[attr-defined]

    def _wait_visible(self, offset: int, timeout: float) -> bool:
        """Block until something at or after ``offset`` is visible, or timeout; True if visible."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._waiters += 1
            try:
                while self.visible_end() <= offset and not self._closed and self._failed is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
            finally:
                self._waiters -= 1
        return self.visible_end() > offset

    # ---------------------------------------------------------------- lifecycle

    def _check_usable(self, closing_ok: bool = False) -> None:
        if self._failed is not None:
            raise LogError(
                f"{self.path}: log failed ({self._failed}); records from offset {self._durable} on may "
                "not be on disk; close it and reopen to recover"
            )
        if self._closed and not closing_ok:
            raise LogError(f"{self.path}: log is closed")

    def close(self) -> None:
        """Flush (unless ``never``), persist group cursors, release files and the lock."""
        if self._closed:
            return
        if self._failed is None and self._policy != "never" and self._next > self._durable:
            with contextlib.suppress(LogError):
                self.sync()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._bg_cond.notify_all()
        for th in self._threads:
            th.join()
        for g in self._groups.values():
            with contextlib.suppress(LogError, OSError):
                g._close()
        if self._cursor_syncer is not None:
            self._cursor_syncer.close()
        self._release_files()

    def _release_files(self) -> None:
        """Drop every file and the lock without flushing or checkpointing (what a crash leaves;
        ``close`` calls it last). Background threads see the log closed and stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._bg_cond.notify_all()
        for view in self._views.values():
            view.close()
        self._views.clear()
        act = getattr(self, "_active", None)
        if act is not None:
            with contextlib.suppress(OSError):
                act.close()
            self._active = None  # type: ignore[assignment]
        fd = getattr(self, "_lockfd", None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no stale pid for `stalkd log inspect` to report
            os.close(fd)
            self._lockfd = None
        self._closed = True

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Log({self.path!r}, next={self._next}, durable={self._durable}, {self._durability})"


def _set_future(fut: object) -> None:
    if not fut.done():  # type: ignore[attr-defined]
        fut.set_result(None)  # type: ignore[attr-defined]

