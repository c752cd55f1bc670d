"""Replaying the WAL tail after a snapshot, fast: records change job fields, containers are filled once.

``replay.replay`` applies one record at a time, moving the job between containers at every
step; for a long tail (the WAL written since the last snapshot can be as large as the live data) the
cost is mostly a Record built per frame and a heap push per job. Here the v1 layouts of the common ops (PUT, DELETE, RELEASE, BURY, KICK, RESERVE, TIMEOUT,
TOUCH) are read straight from the frame; a job a record moves is taken out of its container
once and only its fields follow the later records; at the end every such job is placed where
its final state says, a tube's heap built in one go when many jobs join it. Other ops (PAUSE,
JOB, RESULT, EPOCH) and other
versions go through ``model.decode`` and ``replay.replay``.

Ensures: the engine after ``replay_tail`` then ``replay.finish`` equals the one ``replay.replay``
of every record (same skips) then ``finish`` gives: the same jobs with the same fields in the
same containers, the same ``seq``, ``next_id``, ``body_bytes`` and urgent counts
(tests/engine/test_tail.py checks it on random histories). A record that cannot be decoded
raises TailError naming its log offset; a PUT of a job that exists raises ReplayError.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING

from stalkd.engine.heap import pack
from stalkd.engine.model import BURY as _BURY
from stalkd.engine.model import (
    BURY_FIELDS,
    HEAD_FIELDS,
    HEADER_SIZE,
    PUT_FIELDS,
    RELEASE_FIELDS,
    JobState,
    Op,
    RecordFormatError,
    decode,
)
from stalkd.engine.model import HEAD as _HEAD
from stalkd.engine.model import PUT as _PUT
from stalkd.engine.model import RELEASE as _RELEASE
from stalkd.engine.model import U32 as _U32
from stalkd.engine.objects import URGENT_THRESHOLD, Job, new_lazy_job
from stalkd.engine.replay import ReplayError, replay
from stalkd.log.frame import FRAME_HEADER_SIZE, LENGTH_AT

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
    from stalkd.engine.engine import Engine
    from stalkd.engine.objects import Tube
    from stalkd.log.columns import FrameColumns
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["TailError", "replay_tail"]

_WINDOW = 1 << 23  # bytes of a segment the tail copies at a time (at least one whole frame)
_C_PUT, _C_DELETE, _C_RELEASE, _C_BURY, _C_KICK = int(Op.PUT), int(Op.DELETE), int(Op.RELEASE), int(Op.BURY), int(Op.KICK)
_C_TOUCH, _C_RESERVE, _C_TIMEOUT = int(Op.TOUCH), int(Op.RESERVE), int(Op.TIMEOUT)
_GENERAL = frozenset({Op.PAUSE, Op.JOB, Op.RESULT, Op.EPOCH})  # the ops left to decode() and replay()
_C_RESULT = int(Op.RESULT)  # a result is not part of its job's snapshot entry: never skipped by its stamp
# The sizes the loop adds up, as module constants (compiled: C integers, tail.pxd).
_FRAME_HEAD, _LEN_AT, _REC_HEAD = FRAME_HEADER_SIZE, LENGTH_AT, HEADER_SIZE
_PUT_SIZE, _RELEASE_SIZE, _BURY_SIZE = _PUT.size, _RELEASE.size, _BURY.size
READY, DELAYED, BURIED = JobState.READY, JobState.DELAYED, JobState.BURIED
_LOOSE = -2  # a job's ``hpos`` while the tail holds it out of every container (heaps use -1 and up)
_U64_MAX = 2**64 - 1


class TailError(ValueError):
    """A WAL record that cannot be decoded (the message names its log offset)."""


def _field_at(fields: tuple[tuple[str, str], ...], name: str, start: int = 0) -> int:
    """Where field ``name`` of a layout (model's field tables) lies, the layout starting at ``start``.

    >>> _field_at(HEAD_FIELDS, "seq"), _field_at(PUT_FIELDS, "tube_len", HEADER_SIZE)
    (2, 46)
    """
    codes = "<"
    for n, code in fields:
        if n == name:
            return start + struct.calcsize(codes)
        codes += code
    raise KeyError(name)


# Compiled, _Fields reads these fields with C loads of these widths: a layout that changes them
# must change _Fields too (the import refuses to run otherwise).
_READ_AS = (
    (HEAD_FIELDS, (("version", "B"), ("op", "B"), ("seq", "Q"), ("time_us", "q"), ("job_id", "Q"))),
    (PUT_FIELDS, (("pri", "I"), ("delay", "I"), ("ttr", "I"), ("deadline_us", "q"), ("tube_len", "H"))),
    (RELEASE_FIELDS, (("pri", "I"), ("delay", "I"), ("deadline_us", "q"))),
    (BURY_FIELDS, (("pri", "I"),)),
)
if any(table != expected for table, expected in _READ_AS):  # pragma: no cover - a format change
    raise ImportError("persist/tail.py's _Fields reads an older record layout than engine/model.py's")
_OP_AT = _field_at(HEAD_FIELDS, "op")
_SEQ_AT = _field_at(HEAD_FIELDS, "seq")
_TIME_AT = _field_at(HEAD_FIELDS, "time_us")
_JID_AT = _field_at(HEAD_FIELDS, "job_id")
_PRI_AT = _field_at(PUT_FIELDS, "pri")
_DELAY_AT = _field_at(PUT_FIELDS, "delay")
_TTR_AT = _field_at(PUT_FIELDS, "ttr")
_DEADLINE_AT = _field_at(PUT_FIELDS, "deadline_us")
_TLEN_AT = _field_at(PUT_FIELDS, "tube_len")
_R_DELAY_AT = _field_at(RELEASE_FIELDS, "delay")
_R_DEADLINE_AT = _field_at(RELEASE_FIELDS, "deadline_us")


if not cython.compiled:  # compiled, tail.pxd takes these from C

    def _host_le() -> bool:
        return False

    def memcpy(to: object, source: object, n: int) -> None:
        raise NotImplementedError("compiled only")


def _le(s: bytes, at: int, size: int) -> int:
    """The unsigned little-endian integer of ``size`` bytes at ``s[at]`` (compiled: from a C pointer;
    on a little-endian CPU a copy of the bytes, one load for the constant sizes the callers pass;
    else written out, byte by byte)."""
    if _host_le():
        v = 0
        memcpy(cython.address(v), cython.address(s[at]), size)
        return v
    if size == 8:
        return _le(s, at, 4) | (_le(s, at + 4, 4) << 32)
    if size == 4:
        return s[at] | (s[at + 1] << 8) | (s[at + 2] << 16) | (cython.cast(cython.ulonglong, s[at + 3]) << 24)
    v = 0
    for k in range(size):
        v |= cython.cast(cython.ulonglong, s[at + k]) << (8 * k)
    return v


@cython.cclass
class _Fields:
    """The fixed fields of one record, read where it lies in a chunk's bytes: compiled, C loads
    into C fields (no tuple or int object per field); uncompiled, the layouts' structs."""

    def __init__(self) -> None:
        self.version = self.code = 0
        self.seq = self.time_us = self.jid = 0
        self.pri = self.delay = self.ttr = self.deadline = self.tlen = 0

    def head(self, raw: bytes, at: int) -> None:
        """The header of the record at ``raw[at]``."""
        if not cython.compiled:
            self.version, self.code, self.seq, self.time_us, self.jid = _HEAD.unpack_from(raw, at)
            return
        s = raw
        self.version = s[at]
        self.code = s[at + _OP_AT]
        self.seq = _le(s, at + _SEQ_AT, 8)
        self.time_us = cython.cast(cython.longlong, _le(s, at + _TIME_AT, 8))
        self.jid = _le(s, at + _JID_AT, 8)

    def put(self, raw: bytes, at: int) -> None:
        """A PUT's fields at ``raw[at]`` (after its header)."""
        if not cython.compiled:
            self.pri, self.delay, self.ttr, self.deadline, self.tlen = _PUT.unpack_from(raw, at)
            return
        s = raw
        self.pri = _le(s, at + _PRI_AT, 4)
        self.delay = _le(s, at + _DELAY_AT, 4)
        self.ttr = _le(s, at + _TTR_AT, 4)
        self.deadline = cython.cast(cython.longlong, _le(s, at + _DEADLINE_AT, 8))
        self.tlen = _le(s, at + _TLEN_AT, 2)

    def release(self, raw: bytes, at: int) -> None:
        """A RELEASE's fields at ``raw[at]`` (after its header)."""
        if not cython.compiled:
            self.pri, self.delay, self.deadline = _RELEASE.unpack_from(raw, at)
            return
        s = raw
        self.pri = _le(s, at, 4)
        self.delay = _le(s, at + _R_DELAY_AT, 4)
        self.deadline = cython.cast(cython.longlong, _le(s, at + _R_DEADLINE_AT, 8))

    def bury(self, raw: bytes, at: int) -> None:
        """A BURY's priority at ``raw[at]`` (after its header)."""
        if not cython.compiled:
            (self.pri,) = _BURY.unpack_from(raw, at)
            return
        self.pri = _le(raw, at, 4)


def _u32(raw: bytes, at: int) -> int:
    """The u32 at ``raw[at]`` (a frame's payload length, a body's length)."""
    if not cython.compiled:
        return int(_U32.unpack_from(raw, at)[0])
    return _le(raw, at, 4)


def replay_tail(e: Engine, chunks: Iterable[FrameColumns], start_seq: int, fresh: dict[int, int]) -> int:
    """Apply the records of the frames ``chunks`` describe (``Log.read_columns``: each frame's
    position in its segment's mapping, read there, with no object per frame) to ``e``
    (recovered from a snapshot that starts at ``start_seq``; ``fresh``: {job id: copy seq} of its
    jobs copied late). Returns how many records were applied. Call ``replay.finish`` next.
    """
    jobs = e.jobs
    # Jobs put in the tail go into the job table at once, and into ``born`` (put order) to be
    # placed at the end; a job the tail took out of its container joins ``moved``. Either is
    # "loose" meanwhile: ``hpos`` is ``_LOOSE`` (no heap uses it), so a later record finds with
    # one look-up in the table whether the job still has a container to leave; a deleted loose
    # job goes back to -1 and is not placed. An id at or above ``floor`` that is above every id
    # the tail put so far (``top``) is new to the table without a look-up (ids rise in a log),
    # until the general path runs (``general``): it may put any id. Both are C integers compiled
    # (a record's id is a u64; ``floor`` is capped to one).
    born: list[Job] = []
    moved: list[Job] = []
    floor = min(e.next_id, _U64_MAX)
    top = 0
    j: Job | None
    tubes: dict[bytes, Tube] = {}
    last_tb = b""  # the tube of the last PUT: the next is most often the same
    last_t: Tube | None = None
    f = _Fields()
    first_seq = start_seq
    seq_max = e.seq
    next_id = e.next_id
    body_bytes = 0
    applied = 0
    general = False  # the general path ran: it may have placed or removed a loose job
    for chunk in chunks:
        buf = chunk.buf
        positions = chunk.positions
        # The frames are read from a copy of the segment a window at a time, in place (compiled,
        # through a C pointer: each field a load, each body one bytes object); ``raw`` holds the
        # segment's bytes from ``lo``.
        lo = 0
        raw = b""
        for i in range(len(positions)):
            pos = positions[i]
            if pos + _FRAME_HEAD > lo + len(raw):
                lo, raw = pos, _window(buf, pos, 0)
            n = _u32(raw, pos - lo + _LEN_AT)
            if pos + _FRAME_HEAD + n > lo + len(raw):  # a payload longer than the window left
                lo, raw = pos, _window(buf, pos, n)
            # A record's payload starts after its frame's header and is ``n`` bytes long; every
            # read below stays inside it.
            at = pos - lo + _FRAME_HEAD
            end = at + n
            try:
                if n < _REC_HEAD:
                    raise ValueError("shorter than a record header")  # the general path decides
                f.head(raw, at)
                if f.version != 1:
                    raise ValueError("not a version-1 record")
                seq = f.seq
                if seq <= first_seq:
                    continue
                code = f.code
                jid = f.jid
                if fresh:
                    stamp = fresh.get(jid)
                    if stamp is not None and seq <= stamp and code != _C_RESULT:
                        continue
                if code == _C_PUT:
                    t0 = at + _REC_HEAD + _PUT_SIZE
                    if t0 > end:
                        raise ValueError("PUT record too short")
                    f.put(raw, at + _REC_HEAD)
                    b0 = t0 + f.tlen
                    if b0 + 4 > end:
                        raise ValueError("tube name runs past the end of the record")
                    blen = _u32(raw, b0)
                    if b0 + 4 + blen != end:
                        raise ValueError("body length does not match the record")
                    if last_t is not None and _same(raw, t0, b0, last_tb):
                        t = last_t
                    else:
                        tb = _cut(raw, t0, b0)
                        known = tubes.get(tb)
                        if known is None:
                            known = tubes[tb] = e.tube_named(tb.decode("ascii"))
                        t = last_t = known
                        last_tb = tb
                    key = jid  # compiled: the one int object of this id
                    if (general or f.jid < floor or f.jid <= top) and key in jobs:
                        raise ReplayError(f"record seq {seq}: PUT of job {jid}, which already exists")
                    # The body stays in the window until first read (objects.new_lazy_job): a
                    # window lives while a job of it still holds its body so, until the next
                    # snapshot copies them; the WAL it is a copy of is bounded (compaction).
                    new = new_lazy_job(key, t, f.pri, f.delay, f.ttr, raw, b0 + 4, blen, READY, f.time_us)
                    if f.deadline:
                        new.state = DELAYED
                        new.deadline_us = f.deadline
                    new.hpos = _LOOSE
                    jobs[key] = new
                    born.append(new)
                    body_bytes += blen
                    if f.jid > top:
                        top = f.jid
                    if key >= next_id:
                        next_id = key + 1
                elif code in (_C_RELEASE, _C_BURY, _C_KICK, _C_DELETE):
                    if code == _C_RELEASE:
                        if at + _REC_HEAD + _RELEASE_SIZE > end:
                            raise ValueError("RELEASE record too short")
                        f.release(raw, at + _REC_HEAD)
                    elif code == _C_BURY:
                        if at + _REC_HEAD + _BURY_SIZE > end:
                            raise ValueError("BURY record too short")
                        f.bury(raw, at + _REC_HEAD)
                    j = jobs.get(jid)
                    if j is not None:
                        if j.hpos != _LOOSE:
                            e.detach(j)
                            j.hpos = _LOOSE
                            moved.append(j)
                        if code == _C_RELEASE:
                            j.pri, j.delay = f.pri, f.delay
                            j.releases += 1
                            j.state, j.deadline_us = (DELAYED, f.deadline) if f.deadline else (READY, 0)
                        elif code == _C_BURY:
                            j.pri = f.pri
                            j.buries += 1
                            j.state, j.deadline_us = BURIED, seq
                        elif code == _C_KICK:
                            j.kicks += 1
                            j.state, j.deadline_us = READY, 0
                        else:
                            del jobs[jid]
                            j.hpos = -1
                            body_bytes -= j.blen
                elif code == _C_RESERVE:
                    j = jobs.get(jid)
                    if j is not None:
                        j.reserves += 1
                        if j.state is not READY:  # a reserved job comes back ready
                            if j.hpos != _LOOSE:
                                e.detach(j)
                                j.hpos = _LOOSE
                                moved.append(j)
                            j.state, j.deadline_us = READY, 0
                elif code == _C_TIMEOUT:
                    j = jobs.get(jid)
                    if j is not None:
                        j.timeouts += 1
                elif code != _C_TOUCH:  # a TOUCH changes nothing durable
                    raise ValueError("an op the general path handles")
            except (ValueError, struct.error, UnicodeDecodeError) as exc:
                if isinstance(exc, ReplayError):
                    raise
                # PAUSE, JOB, unknown ops, other versions, or a damaged record: decode() decides.
                try:
                    r = decode(raw[at:end])
                except RecordFormatError as bad:
                    raise TailError(f"record at offset {chunk.first_offset + i}: {bad}") from bad
                if r.seq <= start_seq or r.op is Op.UNKNOWN:
                    continue
                stamp = fresh.get(r.job_id)
                if stamp is not None and r.seq <= stamp and r.op is not Op.RESULT:
                    continue
                if r.op not in _GENERAL:  # pragma: no cover - a fast-path bug
                    raise TailError(f"record at offset {chunk.first_offset + i}: {r.op.name} was not replayed") from exc
                e.seq, e.next_id = max(e.seq, seq_max), max(e.next_id, next_id)
                general = True  # it may put a job with any id, and place or remove a loose one
                replay(e, r)
                seq_max, next_id = e.seq, e.next_id
                applied += 1
                continue
            if seq > seq_max:
                seq_max = seq
            applied += 1
    e.seq = seq_max
    e.next_id = next_id
    e.body_bytes += body_bytes
    _place(e, born, moved, general)
    return applied


def _same(raw: bytes, start: int, end: int, name: bytes) -> bool:
    """``raw[start:end] == name`` (compiled: compared in place, with no bytes object made)."""
    if not cython.compiled:
        return raw[start:end] == name
    n = end - start
    if n != len(name):
        return False
    s = raw
    p = name
    for k in range(n):  # noqa: SIM110 (compiled, a C loop; all() over a generator is not)
        if s[start + k] != p[k]:
            return False
    return True


def _cut(raw: bytes, start: int, end: int) -> bytes:
    """``raw[start:end]`` (compiled: one copy from a C pointer, no slice object)."""
    return cython.cast(cython.p_char, raw)[start:end] if cython.compiled else raw[start:end]


def _window(buf: memoryview, pos: int, n: int) -> bytes:
    """A copy of the segment ``buf`` from the frame at ``pos``, whose payload is ``n`` bytes (0:
    not known yet): ``_WINDOW`` bytes, or that whole frame if longer, so memory stays bounded
    whatever the segment and chunk sizes."""
    return bytes(buf[pos : min(len(buf), max(pos + _FRAME_HEAD + n, pos + _WINDOW))])


def _place(e: Engine, born: list[Job], moved: list[Job], general: bool) -> None:
    """Put every job still loose (``hpos`` ``_LOOSE``: the tail's new jobs, ``born``, and those
    it took out of their containers, ``moved``) where its state says: a ready or delayed one
    into its tube's lists of keys and jobs, each tube's heaps then built with them in one go; a
    buried one into its tube's FIFO (``replay.finish`` orders it by bury seq). After the general
    path (``general``), only those the table still holds as they are."""
    jobs = e.jobs
    # per tube: ready keys, ready jobs, delay keys, delayed jobs
    lists: dict[Tube, tuple[list[int], list[Job], list[int], list[Job]]] = {}
    last: Tube | None = None  # the tube of the job before: a tail's puts come in runs of one tube
    rk: list[int] = []
    rj: list[Job] = []
    dk: list[int] = []
    dj: list[Job] = []
    for js in (born, moved):
        for j in js:
            if j.hpos != _LOOSE or (general and jobs.get(j.id) is not j):
                continue
            j.hpos = -1
            t = j.tube
            if t is not last:
                tl = lists.get(t)
                if tl is None:
                    tl = lists[t] = ([], [], [], [])
                rk, rj, dk, dj = tl
                last = t
            st = j.state
            if st is READY:
                rk.append(pack(j.pri, j.id))
                rj.append(j)
                if j.pri < URGENT_THRESHOLD:
                    t.urgent += 1
            elif st is DELAYED:
                dk.append(pack(j.deadline_us, j.id))
                dj.append(j)
            else:
                t.buried[j.id] = j
    for t, (rk, rj, dk, dj) in lists.items():
        t.ready.add_many(rk, rj)
        t.delayed.add_many(dk, dj)
        e.retime_tube(t)
