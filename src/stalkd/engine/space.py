"""WAL space reservation: room for a record is secured before the engine makes the change.

The log preallocates each segment, so a write into the active segment cannot fail for lack of
space; only starting a new segment can. The budget therefore counts *room*: bytes left in the
active segment plus whole spare segments, each a preallocated file in the log's ``spares/``
directory (``stalkd.log.active.make_spare``). The log renames a spare into place when it starts
a segment, so the room a spare holds is never handed back to the file system, where another
process could take it, on its way to becoming a segment.

Order of checks (as beanstalkd): the engine runs a command's job look-up before it asks for
room (``Engine.room``, engine/room.py), and reserves none for a command that replies NOT_FOUND, so a bury or delayed release of a
job the connection does not hold gets NOT_FOUND, not OUT_OF_MEMORY, on a full disk.

Ensures: ``promised`` (bytes owed to durable records queued but not yet written, plus one
short record per live job so its later delete always fits) never exceeds ``room``, except
transiently while analytics records are written into room no promise needs. A command whose
``admit`` fails has changed nothing and reserved nothing.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from stalkd.engine import model
from stalkd.engine.model import LAYOUTS, PUT_FIXED, ROWS, SHORT_RECORD, Op, OpLayout, Record
from stalkd.log.active import ActiveSegment, drop_spare, make_spare, spares
from stalkd.log.errors import LogError
from stalkd.log.frame import FRAME_HEADER_SIZE, frame_size
from stalkd.log.fs import REAL, FileSystem
from stalkd.log.segment import FOOTER_SIZE, HEADER_SIZE
from stalkd.log.writer import SegmentWriter

__all__ = ["COSTLESS_OPS", "PUT_FRAME_BASE", "SHORT_FRAME", "SpaceBudget", "no_space", "put_frame"]

log = logging.getLogger("stalkd.engine.space")

# Largest frame of any op without tube or body (a RELEASE).
SHORT_FRAME = frame_size(SHORT_RECORD)
# A put's frame is (_PUT_FRAME + tube + body) & ~7: frame_size's rule with the fixed part added.
_PUT_FRAME = FRAME_HEADER_SIZE + PUT_FIXED + 7
MAX_TUBE = 200  # beanstalkd's longest tube name
# put_frame(n) == (PUT_FRAME_BASE + n) & ~7.
PUT_FRAME_BASE = _PUT_FRAME + MAX_TUBE


def no_space(e: BaseException | None, also: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether ``e`` or what caused it is a full disk (ENOSPC) or an exhausted quota (EDQUOT),
    or an instance of one of the ``also`` types.

    >>> no_space(OSError(errno.ENOSPC, "full")), no_space(ValueError())
    (True, False)
    >>> no_space(ValueError(), also=(ValueError,))
    True
    """
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) or isinstance(e, also):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def put_frame(body_len: int, tube_len: int = MAX_TUBE) -> int:
    """On-disk bytes of a put record (``tube_len`` defaults to the longest tube name).

    >>> put_frame(0, 7) == frame_size(52 + 7), put_frame(9) == frame_size(52 + MAX_TUBE + 9)
    (True, True)
    """
    return frame_size(PUT_FIXED + tube_len + body_len)


# Ops whose records are promised nothing at settle (``record_cost`` 0): not durable, or a
# delete, which spends the room its put promised. From the registry's rows.
COSTLESS_OPS = frozenset(op for op, row in LAYOUTS.items() if not row.durable or row.ends) | {Op.UNKNOWN}


_SHORT = SHORT_FRAME  # compiled: a C constant (space.pxd), not a module global read per record


def spent(row: OpLayout, frame: int) -> int:
    """Bytes of promised room a durable record of ``row`` whose frame is ``frame`` bytes uses
    once written: its frame if its size depends on the record (a put, a result), else one
    short frame (what every record of fixed size is promised: the largest of them)."""
    return frame if row.sized else _SHORT


@cython.locals(cost=cython.Py_ssize_t)  # compiled: C ints
def record_cost(r: Record) -> int:
    """Bytes promised for a record, by its op's row (``model.LAYOUTS``): what it will spend
    (``spent``), plus a delete's room for a record that makes a live job (a put); nothing for
    one that ends a job (its put promised that room) or is not durable (analytics records are
    written only into room nobody was promised).

    >>> record_cost(Record(Op.PUT, 1, 0, 1, "t", body=b"x")) == put_frame(1, 1) + SHORT_FRAME
    True
    >>> record_cost(Record(Op.RELEASE, 1, 0, 1)) == SHORT_FRAME, record_cost(Record(Op.DELETE, 1, 0, 1))
    (True, 0)
    """
    p = cython.declare(model.Record, r)  # compiled: its C fields
    row = cython.declare(OpLayout, ROWS[p.op])  # compiled: its row's C attributes
    if row is None or not row.durable or row.ends:
        return 0
    cost = spent(row, frame_size(row.size(p)))
    return cost + _SHORT if row.creates else cost


class SpaceBudget:
    """Room the WAL can write into without allocating, and the bytes already promised from it.

    ``log_dir`` is the log whose ``spares/`` this budget keeps; ``span`` returns the active
    segment's (base offset, position of the end, last usable byte) (``Log.active_span``): a new
    base means the log started segments, renaming spares into place, so they are counted again.
    ``writer``, the log's segment writer, stands for ``span`` when given: ``room`` then reads
    its active segment's fields itself, C fields when compiled, rather than calling a method and
    unpacking a tuple of Python ints per command (callgrind, a durable put at depth 1: ``room``
    2,170 instructions, 1,100 of them ``Log.active_span``).
    ``fs`` is the file system spares are made (allocated) and dropped through; tests inject a
    full disk there.

    >>> import tempfile
    >>> b = SpaceBudget(tempfile.mkdtemp(), 1 << 16, 1024, lambda: (0, 64, 1 << 15))
    >>> b.admit(100), b.promised
    (True, 100)
    """

    def __init__(
        self,
        log_dir: str,
        segment_size: int,
        max_frame: int,
        span: Callable[[], tuple[int, int, int]],
        fs: FileSystem = REAL,
        writer: SegmentWriter | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.segment_size = segment_size
        self.max_frame = max_frame
        # A segment's tail shorter than the next frame is wasted, so count a spare's room net
        # of one largest frame (never less than one short record).
        self.per_spare = max(SHORT_FRAME, segment_size - HEADER_SIZE - FOOTER_SIZE - max_frame)
        self._span = span
        self._writer = writer
        self._base = -1  # the active segment's base when the spares were last counted
        self._fs = fs
        self.promised = 0
        self.refused = 0  # admissions refused (stats, tests)
        self.short = False  # an admission was refused since the WAL last shed dead segments
        self.dropped = 0  # analytics records not written for lack of room
        self.spares = len(spares(log_dir, segment_size))
        # Asked before the WAL takes another spare's room from the file system; False refuses it
        # (the WAL's owner keeps a snapshot's room growing with the live data there: walspace.py).
        self.before_grow: Callable[[], bool] | None = None

    @cython.locals(base=cython.Py_ssize_t, pos=cython.Py_ssize_t, limit=cython.Py_ssize_t,
                   active=cython.Py_ssize_t)  # fmt: skip
    def room(self) -> int:
        """Bytes that can surely be written: the active segment's rest plus the spares'."""
        w = cython.declare(SegmentWriter, self._writer)
        if w is not None:
            act = cython.declare(ActiveSegment, w.active)
            if act is None:
                raise LogError(f"{w.path}: log is closed")
            base, pos, limit = act.base, act.pos, act.limit
        else:
            base, pos, limit = self._span()
        if base != self._base:
            self._new_segment(base)
        active = limit - pos - self.max_frame
        return (active if active > 0 else 0) + self.spares * self.per_spare

    def admit(self, cost: int) -> bool:
        """Promise ``cost`` more bytes, adding spare segments if needed; False (nothing
        promised) when the file system has no room for them."""
        while self.room() - self.promised < cost:
            if not self._grow():
                self.refused += 1
                self.short = True
                return False
        self.promised += cost
        return True

    def fits(self, n: int) -> bool:
        """Whether ``n`` unpromised bytes (analytics records) can be written without touching
        room promised to others."""
        return self.room() - self.promised >= n or (
            self._grow() and self.room() - self.promised >= n
        )

    @cython.locals(cost=cython.Py_ssize_t)  # (callgrind, a put at depth 1: 1,800 -> 590 instructions)
    def settle(self, admitted: int, records: Sequence[Record]) -> None:
        """After the engine ran an admitted command: promise exactly what its records need."""
        cost = 0
        for r in records:
            cost += record_cost(r)
        self.promised += cost - admitted

    def written(self, spent: int) -> None:
        """Durable records reached the log: ``spent`` bytes promised for them are used (a put
        spends its own frame and keeps its delete's share)."""
        left = self.promised - spent
        self.promised = max(left, 0)

    def _new_segment(self, base: int) -> None:
        """The log's active segment is another since the spares were counted: the segments it
        started took spares (a segment larger than a spare took none), so count them again."""
        if self._base >= 0:
            self.spares = len(spares(self.log_dir, self.segment_size))
        self._base = base

    def release(self, n: int) -> bool:
        """Give up to ``n`` spares' room back to the file system; False if there was none."""
        done = False
        for _ in range(n):
            if not drop_spare(self.log_dir, self.segment_size, self._fs):
                break
            done = True
        self.spares = len(spares(self.log_dir, self.segment_size))
        return done

    def release_unpromised(self) -> int:
        """Give back the spares no promise needs (room for a snapshot while the disk is full:
        compaction is what frees space); returns how many."""
        n = 0
        while self.spares and self.room() - self.per_spare >= self.promised:
            self.release(1)
            n += 1
        return n

    def _grow(self) -> bool:
        if self.before_grow is not None and not self.before_grow():
            return False
        try:
            make_spare(self.log_dir, self.segment_size, self._fs)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                return False
            raise
        self.spares += 1
        return True

    def close(self) -> None:
        """Nothing to release: the spares stay on disk, still holding their room."""
