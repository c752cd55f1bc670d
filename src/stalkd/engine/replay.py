"""Rebuild an engine from WAL records, and view a live engine as the records a restart would see.

The durable meaning of each op (what recovery reproduces):
  PUT      the job exists, READY or DELAYED until ``deadline_us``;
  RESERVE  the job is READY again (a reserved job comes back ready, as in beanstalkd), reserves+1;
  TIMEOUT  timeouts+1;  TOUCH, PAUSE: nothing (tube pauses are not restored, as in beanstalkd);
  RELEASE  pri and delay set, releases+1, READY or DELAYED until ``deadline_us``;
  BURY     pri set, buries+1, BURIED (the record's seq orders the buried FIFO);
  KICK     kicks+1, READY;   DELETE  the job is gone;
  JOB      the job's whole durable state (snapshots).
  RESULT   the job's result until ``deadline_us`` (0: none); kept whether or not the job
           exists (a result outlives its job); ``tick`` after recovery drops expired ones.
  EPOCH    ``(epoch, start_offset)`` joins the engine's ``epochs`` (once per epoch).
Records about unknown jobs are ignored (their PUT may be covered by a snapshot that no longer has
them); a PUT of a job that already exists means the log is inconsistent and raises.

Ensures: ``replay`` of ``durable_records(e)`` into a fresh engine, then ``finish``, gives an
engine whose ``durable_records`` equal the original's (restart equivalence).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from stalkd.engine.engine import Engine
from stalkd.engine.heap import pack
from stalkd.engine.model import (
    FORMAT_VERSION,
    HEAD_FIELDS,
    HEADER_SIZE,
    LAYOUTS,
    PUT_FIELDS,
    PUT_FIXED,
    JobState,
    Op,
    Record,
    RecordFormatError,
    decode,
)
from stalkd.engine.objects import Job, job_body, new_job
from stalkd.engine.results import store_result
from stalkd.engine.state import EngineState

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["RULES", "ReplayError", "durable_record", "durable_records", "finish", "ID_BAND", "note_epoch", "replay",
           "replay_put"]  # fmt: skip


class ReplayError(ValueError):
    """A record contradicts the state rebuilt so far (names the record's seq and job id)."""


def replay(e: Engine, r: Record) -> None:
    """Apply one record's durable effect to ``e`` (an engine being recovered, no connections).

    >>> from stalkd.engine.engine import Engine  # (compiled, the module's own names are C types)
    >>> from stalkd.engine.model import Record, Op
    >>> e = Engine()
    >>> replay(e, Record(Op.PUT, 1, 5_000_000, 7, "t", 1, 0, 60, 0, b"x", created_us=5_000_000))
    >>> e.jobs[7].state.name, e.next_id
    ('READY', 8)
    """
    s = e.state
    if r.seq > s.seq:
        s.seq = r.seq
    op = r.op
    if op is _PUT:  # the commonest record, a C call when compiled
        _new_job(s, r)
    else:
        _RULE_BY_CODE[op](s, r)


def replay_put(e: Engine, p: bytes) -> None:
    """``replay(e, decode(p))`` for the payload ``p`` of a PUT record: what a standby does for
    every job its primary sends (``frames.check_payloads`` hands it version-1 PUTs as their
    payloads). Compiled, a version-1 PUT's fields are read by C loads into the new
    job, with no Record, no seq object and no dispatch built for it; anything else (another
    version, a payload that does not add up) goes through ``decode`` and ``replay``, which say
    what is wrong with it.

    >>> from stalkd.engine.engine import Engine  # (compiled, the module's own names are C types)
    >>> from stalkd.engine.model import Op, Record, encode
    >>> e = Engine()
    >>> replay_put(e, encode(Record(Op.PUT, 3, 5_000_000, 7, "t", 1, 0, 60, 0, b"x", created_us=5_000_000)))
    >>> e.jobs[7].state.name, e.jobs[7].body, e.seq, e.next_id
    ('READY', b'x', 3, 8)
    """
    if not cython.compiled or type(p) is not bytes:
        replay(e, decode(p))
        return
    n = len(p)
    c = cython.cast(cython.p_uchar, cython.cast(cython.p_char, p))
    if n < _PUT_MIN or c[0] != _V1 or c[1] != _C_PUT:
        replay(e, decode(p))
        return
    tlen = _le16(cython.address(c[_TLEN_AT]))
    at = _TUBE_AT + tlen  # the body's length, after the tube name
    if at + 4 > n:
        replay(e, decode(p))
        return
    size = _le32(cython.address(c[at]))
    seq = _le64(cython.address(c[_SEQ_AT]))
    if at + 4 + size != n or seq > _SEQ_MAX:  # (decode says what is wrong; replay raises as before)
        replay(e, decode(p))
        return
    try:
        tube = _text(p, _TUBE_AT, tlen)
    except (RecordFormatError, UnicodeDecodeError):  # (a name that is not ASCII: decode says so)
        replay(e, decode(p))
        return
    s = e.state
    if cython.cast(cython.longlong, seq) > s.seq:
        s.seq = seq
    jid = _le64(cython.address(c[_JID_AT]))  # (an int object from here on)
    created = cython.cast(cython.longlong, _le64(cython.address(c[_TIME_AT])))
    body = PyBytes_FromStringAndSize(cython.cast(cython.p_char, cython.address(c[at + 4])), size)
    t = s._tube(tube)
    j = new_job(jid, t, _le32(cython.address(c[_PRI_AT])), _le32(cython.address(c[_DELAY_AT])),
                _le32(cython.address(c[_TTR_AT])), body, _READY, created)  # fmt: skip
    if not s.jobs.add(jid, j):  # (made first, then dropped: the table's one look-up says so)
        s._maybe_drop_tube(t)  # (a tube only this record named goes again, as if never made)
        raise ReplayError(f"record seq {seq}: PUT of job {jid}, which already exists")
    s.body_bytes += size
    if jid >= s.next_id:
        s.next_id = jid + 1
    deadline = cython.cast(cython.longlong, _le64(cython.address(c[_DEADLINE_AT])))
    if deadline:
        _place(s, j, _DELAYED, deadline)
    else:
        s._to_ready(j)


def _field_at(fields: tuple[tuple[str, str], ...], name: str, start: int = 0) -> int:
    """Where field ``name`` of one of model's layouts lies, the layout starting at ``start``."""
    codes = "<"
    for field, code in fields:
        if field == name:
            return start + struct.calcsize(codes)
        codes += code
    raise KeyError(name)


# replay_put's C loads (compiled: C constants, replay.pxd): where a version-1 PUT's fields lie,
# from model's layouts, and the widths it reads them with (a layout that changes those must
# change replay_put: the import refuses to run otherwise).
if HEAD_FIELDS[2:] != (("seq", "Q"), ("time_us", "q"), ("job_id", "Q")) or PUT_FIELDS != (
        ("pri", "I"), ("delay", "I"), ("ttr", "I"), ("deadline_us", "q"), ("tube_len", "H")):  # fmt: skip
    raise ImportError("engine/replay.py's replay_put reads an older PUT layout than engine/model.py's")
_V1, _C_PUT, _PUT_MIN = FORMAT_VERSION, int(Op.PUT), PUT_FIXED
_TUBE_AT = PUT_FIXED - 4  # (the u32 of the body's length follows the name)
_SEQ_AT, _TIME_AT, _JID_AT = (_field_at(HEAD_FIELDS, f) for f in ("seq", "time_us", "job_id"))
_PRI_AT, _DELAY_AT, _TTR_AT, _DEADLINE_AT, _TLEN_AT = (
    _field_at(PUT_FIELDS, f, HEADER_SIZE) for f in ("pri", "delay", "ttr", "deadline_us", "tube_len"))  # fmt: skip
_SEQ_MAX = 2**63 - 1  # (EngineState.seq's C type holds no more: decode's record then raises, as always)

if not cython.compiled:  # compiled, replay.pxd declares them: C (replay_put's loads run compiled only)
    if TYPE_CHECKING:  # (not at run time: a compiled model has no such Python name)
        from stalkd.engine.model import _text

    def _le16(p: object) -> int:
        raise NotImplementedError("compiled only")

    _le32 = _le64 = _le16

    def PyBytes_FromStringAndSize(s: object, n: int) -> bytes:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")


def _new_job(s: EngineState, r: Record) -> None:
    if s.jobs.get(r.job_id) is not None:  # (compiled: JobTable.get is a C call, ``in`` a slot's)
        raise ReplayError(f"record seq {r.seq}: {r.op.name} of job {r.job_id}, which already exists")
    _create(s, r)


def _result(s: EngineState, r: Record) -> None:
    store_result(s, r.job_id, r.deadline_us, r.body)


def _epoch(s: EngineState, r: Record) -> None:
    _note_epoch(s, r.epoch, r.start_offset)


def _nothing(s: EngineState, r: Record) -> None:
    """TOUCH and PAUSE change nothing durable; an op this build does not know is skipped."""


def _on_job(rule: Callable[[EngineState, Record, Job], None]) -> Callable[[EngineState, Record], None]:
    """``rule`` applied to the record's job, if it exists (records about unknown jobs are ignored)."""

    def apply(s: EngineState, r: Record) -> None:
        j = s.jobs.get(r.job_id)
        if j is not None:
            rule(s, r, j)

    return apply


def _delete(s: EngineState, r: Record, j: Job) -> None:
    s._detach(j)
    del s.jobs[j.id]
    s.body_bytes -= j.blen


def _reserve(s: EngineState, r: Record, j: Job) -> None:
    j.reserves += 1
    if j.state is not JobState.READY:
        s._detach(j)
        s._to_ready(j)


def _timeout(s: EngineState, r: Record, j: Job) -> None:
    j.timeouts += 1


def _release(s: EngineState, r: Record, j: Job) -> None:
    s._detach(j)
    j.pri, j.delay = r.pri, r.delay
    j.releases += 1
    _place(s, j, JobState.DELAYED if r.deadline_us else JobState.READY, r.deadline_us)


def _bury(s: EngineState, r: Record, j: Job) -> None:
    s._detach(j)
    j.pri = r.pri
    j.buries += 1
    s._to_buried(j, r.seq)


def _kick(s: EngineState, r: Record, j: Job) -> None:
    s._detach(j)
    j.kicks += 1
    s._to_ready(j)


# Each op's replay rule (its meaning is in the module docstring): with model.LAYOUTS, the whole
# of what a record type is. Every op with a row in the registry must have a rule here.
RULES: dict[Op, Callable[[EngineState, Record], None]] = {
    Op.PUT: _new_job, Op.JOB: _new_job, Op.RESULT: _result, Op.EPOCH: _epoch, Op.TOUCH: _nothing,
    Op.PAUSE: _nothing, Op.UNKNOWN: _nothing, Op.DELETE: _on_job(_delete), Op.RESERVE: _on_job(_reserve),
    Op.TIMEOUT: _on_job(_timeout), Op.RELEASE: _on_job(_release), Op.BURY: _on_job(_bury), Op.KICK: _on_job(_kick),
}  # fmt: skip
if not set(LAYOUTS) <= set(RULES):
    raise ImportError(f"model.LAYOUTS has ops without a replay rule: {sorted(set(LAYOUTS) - set(RULES))}")
_RULE_BY_CODE = tuple(RULES.get(code, _nothing) for code in range(256))  # type: ignore[call-overload]
_PUT = Op.PUT
_READY, _DELAYED, _BURIED = JobState.READY, JobState.DELAYED, JobState.BURIED


ID_BAND = 1 << 43
"""Job ids per epoch: from the start of epoch ``e`` ids are at least ``e * ID_BAND``, so a
promoted standby never hands out an id its former primary could have handed out (the old
primary's are below the band, whatever the standby had received). 1,024 epochs fit below 2**53,
the largest integer a JavaScript client reads exactly; 8.8e12 ids fit in each."""


def note_epoch(e: Engine, epoch: int, start_offset: int) -> None:
    """``epoch`` began at ``start_offset`` (a record seen twice, or also in a snapshot's
    header, counts once); ids from now on are in its band (``ID_BAND``).

    >>> from stalkd.engine.engine import Engine
    >>> e = Engine(); note_epoch(e, 2, 90); note_epoch(e, 1, 40); note_epoch(e, 2, 90); e.epochs
    ((1, 40), (2, 90))
    >>> e.next_id == 2 * ID_BAND
    True
    """
    _note_epoch(e.state, epoch, start_offset)


def _note_epoch(s: EngineState, epoch: int, start_offset: int) -> None:
    if all(ep != epoch for ep, _ in s.epochs):
        s.epochs = tuple(sorted((*s.epochs, (epoch, start_offset))))
    if s.next_id < epoch * ID_BAND:
        s.next_id = epoch * ID_BAND


def finish(e: Engine) -> None:
    """End of recovery: order each buried FIFO by bury sequence (snapshot entries arrive in any
    order) and forget the replay's bookkeeping. Call ``tick(now)`` next to expire delays."""
    s = e.state
    for t in s.tube_order:
        if len(t.buried) > 1:
            t.buried = OrderedDict(sorted(t.buried.items(), key=lambda kv: kv[1].deadline_us))
    s._dirty.clear()
    s._records = []


def durable_record(j: Job, seq: int) -> Record:
    """The JOB record a snapshot stores for ``j``; a RESERVED job is stored as READY."""
    state = j.state
    deadline = j.deadline_us
    if state is JobState.RESERVED:
        state, deadline = JobState.READY, 0
    return Record(
        Op.JOB, seq, j.created_us, j.id, j.tube.name, j.pri, j.delay, j.ttr, deadline, job_body(j),
        state, j.created_us, j.reserves, j.timeouts, j.releases, j.buries, j.kicks,
    )  # fmt: skip


def durable_records(e: Engine) -> Iterator[Record]:
    """Every live job as a JOB record stamped with the engine's current seq, in id order."""
    for jid in sorted(e.jobs):
        yield durable_record(e.jobs[jid], e.seq)


def _create(s: EngineState, r: Record) -> None:
    t = s._tube(r.tube)
    put = r.op is _PUT
    jid = r.job_id
    body = r.body
    j = new_job(jid, t, r.pri, r.delay, r.ttr, body, _READY, r.time_us if put else r.created_us)
    s.jobs[jid] = j
    s.body_bytes += len(body)
    if jid >= s.next_id:
        s.next_id = jid + 1
    if put:
        _place(s, j, _DELAYED if r.deadline_us else _READY, r.deadline_us)
        return
    j.reserves, j.timeouts, j.releases, j.buries, j.kicks = (
        r.reserves, r.timeouts, r.releases, r.buries, r.kicks,
    )  # fmt: skip
    state = JobState.READY if r.state is JobState.RESERVED else r.state
    _place(s, j, state, r.deadline_us)


def _place(s: EngineState, j: Job, state: JobState, deadline_us: int) -> None:
    if state is _DELAYED:
        j.state = state
        j.deadline_us = deadline_us
        j.tube.delayed.push(pack(deadline_us, j.id), j)
        s._retime_tube(j.tube)
    elif state is _BURIED:
        s._to_buried(j, deadline_us)
    else:
        s._to_ready(j)
