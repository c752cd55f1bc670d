"""The segment writer: frames into the active segment, roll-over to new segments, sealing.

Ensures:
  * offsets are dense and monotonic: the n-th record ever written has offset n, across segments;
  * a refused write (full disk, a failed write that could be undone) leaves nothing a later
    open could see: a batch that needs new segments has them all allocated before any frame is
    written, and bytes that may have landed from a failed write are zeroed;
  * a segment is sealed (footer written and fsynced) before the next one receives a frame, so
    the sealed segments' data is durable whatever the durability policy;
  * ``bounds`` always lists the live segments, oldest first, the active one last.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from .active import ActiveSegment, create_segment, write_footer
from .errors import LogError, LogFullError
from .frame import (
    encode_data_frame,
    encode_data_frames,
    frame_size,
    frames_size,
    put_data_frame,
)
from .fs import FileSystem
from .mutex import new_mutex
from .recovery import Recovered
from .segment import FOOTER_SIZE, HEADER_SIZE, MAX_EPOCH, encode_footer, encode_header

__all__ = ["SegmentWriter"]

Payload = bytes | bytearray | memoryview
Bounds = tuple[tuple[int, int | None, str], ...]


class SegmentWriter:
    """Appends frames to a log directory's segments; one per open log, guarded by ``lock``.

    ``on_fatal(exc)`` is told when a failed write could not be undone (the log must stop);
    ``on_sealed(end)`` when a segment's footer made everything below ``end`` durable.
    ``clock`` (nanoseconds, ``time.time_ns``) stamps frames and segment headers: a test that
    compares two logs byte for byte gives both the same clock.

    Compiled, an extension type whose attributes, ``append`` and ``write_many`` are C-level
    (writer.pxd).
    """

    def __init__(
        self,
        path: str,
        segment_size: int,
        io: str,
        fsync_new: bool,
        fs: FileSystem,
        on_fatal: Callable[[BaseException], None],
        on_sealed: Callable[[int], None],
        zero_ahead: int = 0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.path = path
        self.clock = clock
        self.zero_ahead = zero_ahead  # see active.ZERO_AHEAD
        self.segment_size = segment_size
        self.io = io
        self.fs = fs
        self.fsync_new = fsync_new  # fsync new segments' directory entries (not under 'never')
        # Compiled, both are taken by C calls (mutex.py: a threading.Lock's acquire and release
        # are Python calls, ~430 instructions each; a durable put took six of these).
        self.lock = new_mutex()  # order of writes and the active segment
        self._fdlock = new_mutex()  # retiring a segment fd while a sync uses it
        self._on_fatal = on_fatal
        self._on_sealed = on_sealed
        self.sealed: list[tuple[int, int, str]] = []  # (base, end offset, path) of live sealed segments
        self.next = 0
        self.pinned = 0  # the end ``pin`` read with the segment it pinned
        # A consumer group's lag limit may refuse appends (the log's ``_refusers`` is not empty,
        # set with it under ``lock``): what the WAL's batch path reads as a C field, rather than
        # the log's list per batch.
        self.refusing = False
        self.active: ActiveSegment | None = None
        self.bounds: Bounds = ()

    # ---------------------------------------------------------------- opening

    def resume(self, rec: Recovered) -> None:
        """Continue where recovery says the log ends: reopen its active segment, raising its
        epoch before anything is written, or start a new one."""
        self.sealed = list(rec.sealed)
        self.next = rec.next_offset
        if rec.active is None:
            self._set_active(self._create(rec.next_offset, self.segment_size))
            return
        path, base, pos, epoch = rec.active
        fs = self.fs
        fd = fs.open(path, os.O_RDWR)
        size = os.fstat(fd).st_size
        if pos + FOOTER_SIZE > size:  # a file cut short (not by us: we preallocate): room for the footer
            size = max(self.segment_size, pos + FOOTER_SIZE)
            try:
                fs.allocate(fd, 0, size)
            except OSError as e:
                os.close(fd)
                raise LogFullError(f"{path}: cannot restore the room of a truncated segment: {e}") from e
        if epoch >= MAX_EPOCH:  # epochs exhausted: seal this one and start afresh
            write_footer(fs, fd, size, base, rec.next_offset, pos, epoch)
            os.close(fd)
            self.sealed.append((base, rec.next_offset, path))
            self._set_active(self._create(rec.next_offset, self.segment_size))
            return
        # Raise the epoch before writing anything: frames left past the cut carry an older
        # epoch, and a scan rejects them once a newer frame precedes them.
        try:
            fs.pwrite_all(fd, encode_header(base, epoch + 1, self.clock() // 1000), 0)
            fs.fdatasync(fd)
        except OSError:
            os.close(fd)
            raise
        self._set_active(ActiveSegment(path, fd, base, pos, size, epoch + 1, self.io, fs, self.zero_ahead))

    def _create(self, base: int, size: int) -> ActiveSegment:
        return create_segment(self.path, base, size, 1, self.io, self.fsync_new, self.fs, self.zero_ahead,
                              self.clock)  # fmt: skip

    def _set_active(self, seg: ActiveSegment) -> None:
        self.active = seg
        self._publish()

    def _publish(self) -> None:
        act = self.active
        tail: Bounds = () if act is None else ((act.base, None, act.path),)
        self.bounds = tuple((b, e, p) for b, e, p in self.sealed) + tail

    # ---------------------------------------------------------------- writing

    def append(self, payload: Payload) -> int:
        """The fast path of one record: its offset, or -1 when it does not fit the active
        segment (the caller then goes through :meth:`write_many`)."""
        lock = self.lock
        lock.acquire()  # (not ``with``: see pin_end; once per record)
        try:
            act = cython.declare(ActiveSegment, self.active)  # compiled: its C attributes and write
            if act is None:
                return -1
            off = self.next
            mm = act.mm
            if mm is not None:  # no system call per record (bench/log_bench.py: mmap vs pwrite)
                end = put_data_frame(mm, act.pos, act.room, payload, off - act.base, self.clock() // 1000, act.epoch)
                if end < 0:
                    end = self._append_zeroing(act, mm, payload, off)
                    if end < 0:
                        return -1
            else:
                pos = act.pos
                end = pos + frame_size(len(payload))
                if end > act.limit:
                    return -1
                self._write_checked(act, encode_data_frame(payload, off - act.base, self.clock() // 1000, act.epoch),
                                    pos)  # fmt: skip
            act.pos = end
            self.next = off + 1
        finally:
            lock.release()
        return off

    def _append_zeroing(self, act: ActiveSegment, mm: mmap.mmap, payload: Payload, off: int) -> int:
        """``append`` of a frame that ends past the zeros written so far (to ``act``'s mapping
        ``mm``): zero the next stretch and store it; -1 if it does not fit the segment."""
        if act.pos + frame_size(len(payload)) > act.limit:
            return -1
        self._zero_checked(act, act.pos + frame_size(len(payload)))
        return put_data_frame(mm, act.pos, act.room, payload, off - act.base, self.clock() // 1000, act.epoch)

    # no int objects (the clock's nanoseconds too: a C division, not a Python one)
    @cython.locals(total=cython.Py_ssize_t, pos=cython.Py_ssize_t, first=cython.Py_ssize_t, ns=cython.longlong)
    def write_many(
        self, items: Sequence[Payload], admit: Callable[[Sequence[Payload]], None] | None
    ) -> tuple[int, int]:
        """Write ``items`` (not empty) as consecutive records; (first, last) offsets.

        ``admit(items)`` runs first, under the lock (it may refuse by raising); None: nothing to ask."""
        lock = self.lock
        lock.acquire()  # (not ``with``: see pin_end; once per batch written)
        try:
            if admit is not None:
                admit(items)
            act = cython.declare(ActiveSegment, self.active)
            if act is None:
                raise LogError(f"{self.path}: log is closed")
            first = self.next
            try:
                total = frames_size(items)
            except ValueError as e:
                raise ValueError(f"{self.path}: {e}") from None
            pos = act.pos
            if pos + total <= act.limit:
                ns = self.clock()
                data = encode_data_frames(items, first - act.base, ns // 1000, act.epoch)
                try:
                    act.write(data, pos)
                except OSError as e:
                    self._write_failed(act, data, pos, e)
                act.pos = pos + total
                self.next = first + len(items)
            else:
                self._write_rolling(items)
            return first, self.next - 1
        finally:
            lock.release()

    def _write_rolling(self, items: Sequence[Payload]) -> None:
        """A batch that crosses segment ends: allocate every segment it needs first, so a full
        disk refuses the whole batch before any of it is written."""
        plan: list[tuple[ActiveSegment, int, int]] = []  # (segment, first item, end item)
        cur = self.active
        assert cur is not None
        pos, start = cur.pos, 0
        created: list[ActiveSegment] = []
        offset = self.next
        try:
            for i, p in enumerate(items):
                need = frame_size(len(p))
                if pos + need > cur.limit:
                    plan.append((cur, start, i))
                    size = max(self.segment_size, HEADER_SIZE + need + FOOTER_SIZE)
                    cur = self._create(offset + i, size)
                    created.append(cur)
                    pos, start = HEADER_SIZE, i
                pos += need
            plan.append((cur, start, len(items)))
        except BaseException:
            for seg in created:
                seg.close()
                with contextlib.suppress(OSError):
                    self.fs.unlink(seg.path)
            raise
        ts = self.clock() // 1000
        for k, (seg, lo, hi) in enumerate(plan):
            if lo < hi:
                data = encode_data_frames(items[lo:hi], offset + lo - seg.base, ts, seg.epoch)
                self._write_checked(seg, data, seg.pos)
                seg.pos += len(data)
            self.next = offset + hi
            if k + 1 < len(plan):
                self._seal(seg, plan[k + 1][0])

    def _zero_checked(self, seg: ActiveSegment, end: int) -> None:
        try:
            seg.zero_to(end)
        except OSError as e:  # only zeros past the data were written: nothing to undo
            if e.errno in (errno.ENOSPC, errno.EDQUOT):  # a copy-on-write file system
                raise LogFullError(f"{seg.path}: no space zeroing past byte {seg.pos}: {e.strerror}") from e
            raise LogError(f"{seg.path}: write failed zeroing past byte {seg.pos}: {e}") from e

    def _write_checked(self, seg: ActiveSegment, data: bytes | bytearray, pos: int) -> None:
        try:
            seg.write(data, pos)
        except OSError as e:
            self._write_failed(seg, data, pos, e)

    def _write_failed(self, seg: ActiveSegment, data: bytes | bytearray, pos: int, e: OSError) -> NoReturn:
        """Writing ``data`` at ``pos`` raised ``e``: zero what may have landed, so a crash cannot
        make the refused frames reappear, and refuse the write."""
        try:
            seg.write(bytes(len(data)), pos)
        except OSError as e2:
            self._on_fatal(e2)
            raise LogError(f"{seg.path}: write failed at byte {pos} and could not be undone: {e2}") from e
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise LogFullError(f"{seg.path}: no space writing at byte {pos}: {e.strerror}") from e
        raise LogError(f"{seg.path}: write failed at byte {pos}: {e}") from e

    def _seal(self, old: ActiveSegment, new: ActiveSegment) -> None:
        """Footer on ``old`` (fsynced, whatever the policy: it orders the roll-over), then switch.

        The footer says a segment follows, so that segment's name is made durable first: under
        ``never`` its creation did not fsync the directory, and a power cut could keep the footer
        without the name, which recovery refuses as damage (the power-loss campaign found a
        server under ``never`` that would not start without a repair)."""
        end = new.base
        if not self.fsync_new:
            self.fs.fsync_dir(self.path)
        if old.mm is not None:
            old.mm[old.size - FOOTER_SIZE : old.size] = encode_footer(old.base, end, old.pos, old.epoch)
            self.fs.fdatasync(old.fd)
        else:
            write_footer(self.fs, old.fd, old.size, old.base, end, old.pos, old.epoch)
        self.sealed.append((old.base, end, old.path))
        self._set_active(new)
        with self._fdlock:
            old.retired = True
            if old.users == 0:
                old.close()
        self._on_sealed(end)

    # ---------------------------------------------------------------- syncing (GroupCommit's Pinner)

    def pin_end(self) -> tuple[int, ActiveSegment]:
        """(offset end, active segment) written so far; the segment's fd stays open until
        :meth:`unpin`, even if a roll-over retires it meanwhile."""
        # acquire/release, not ``with``: compiled, a ``with`` on a lock looks up and calls
        # __enter__ and __exit__ (~1,700 instructions under callgrind), the two method calls
        # ~400; a durable writer pins and unpins once per fsync.
        lock, fdlock = self.lock, self._fdlock
        lock.acquire()
        try:
            seg = cython.declare(ActiveSegment, self.active)  # compiled: its C fields
            if seg is None:  # files already released (close, or a simulated crash)
                raise LogError(f"{self.path}: log is closed")
            fdlock.acquire()
            seg.users += 1
            fdlock.release()
            return self.next, seg
        finally:
            lock.release()

    @cython.locals(seg=ActiveSegment)
    def pin(self) -> ActiveSegment:
        """``pin_end`` for the group commit's sync (one at a time: its leader, or the lone
        writer): the segment, and the end in ``pinned``, read under the same lock. Compiled, a
        C call with nothing built (``pin_end`` builds a tuple and an int per sync)."""
        lock, fdlock = self.lock, self._fdlock
        lock.acquire()  # (not ``with``: see pin_end)
        try:
            seg = self.active
            if seg is None:  # files already released (close, or a simulated crash)
                raise LogError(f"{self.path}: log is closed")
            fdlock.acquire()
            seg.users += 1
            fdlock.release()
            self.pinned = self.next
            return seg
        finally:
            lock.release()

    def unpin(self, seg: ActiveSegment) -> None:
        fdlock = self._fdlock
        fdlock.acquire()  # (not ``with``: see pin_end)
        try:
            seg.users -= 1
            if seg.retired and seg.users == 0:
                seg.close()
        finally:
            fdlock.release()

    def fdatasync(self, fd: int) -> None:
        self.fs.fdatasync(fd)

    # ---------------------------------------------------------------- retention and closing

    def drop_sealed(self, bound: int) -> list[tuple[int, int, str]]:
        """Forget the sealed segments wholly below ``bound``; returns them (the caller removes
        the files)."""
        with self.lock:
            doomed = [s for s in self.sealed if s[1] <= bound]
            if doomed:
                self.sealed = [s for s in self.sealed if s[1] > bound]
                self._publish()
        return doomed

    def restore_sealed(self, kept: list[tuple[int, int, str]]) -> None:
        """Segments ``drop_sealed`` returned whose files could not be removed: tracked again (they
        are below every segment still tracked), so a later retention removes them. Untracked, they
        would stay behind a gap in offsets that the next open refuses."""
        with self.lock:
            self.sealed = kept + self.sealed
            self._publish()

    def close(self) -> None:
        """Close the active segment's file (no footer: it stays the active one)."""
        act = self.active
        if act is not None:
            with contextlib.suppress(OSError):
                act.close()
            self.active = None
