"""Records and hot replies built by setting slots directly (the engine's per-command values).

A frozen dataclass's ``__init__`` pays an ``object.__setattr__`` lookup and call per field; the
engine builds one Record per durable change and one reply per command, so these build the same
values through the slots' descriptors instead. tests/engine/test_fast_values.py checks that each
equals (and hashes as) what the constructor builds.

Ensures: ``make_record(...) == Record(...)`` for the same arguments; ``inserted(i)`` and
``reserved(j)`` equal ``Reply("INSERTED", (i,))`` and ``JobReply("RESERVED", j.id, j.body)``.
"""

from __future__ import annotations

import dataclasses

from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.objects import Job
from stalkd.protocol import commands as C

__all__ = ["inserted", "make_record", "reserved"]

READY = JobState.READY
_new = object.__new__
_set_word = C.Reply.__dict__["word"].__set__
_set_args = C.Reply.__dict__["args"].__set__
_set_jword = C.JobReply.__dict__["word"].__set__
_set_jid = C.JobReply.__dict__["id"].__set__
_set_jbody = C.JobReply.__dict__["body"].__set__

_RECORD_FIELDS = (
    "op", "seq", "time_us", "job_id", "tube", "pri", "delay", "ttr", "deadline_us", "body", "state",
    "created_us", "reserves", "timeouts", "releases", "buries", "kicks", "epoch", "start_offset",
)  # fmt: skip
if tuple(f.name for f in dataclasses.fields(Record)) != _RECORD_FIELDS:  # pragma: no cover
    raise ImportError("model.Record's fields changed: update fastvalues.make_record with them")
(_s_op, _s_seq, _s_time, _s_job, _s_tube, _s_pri, _s_delay, _s_ttr, _s_deadline, _s_body, _s_state,
 _s_created, _s_reserves, _s_timeouts, _s_releases, _s_buries, _s_kicks, _s_epoch, _s_start) = (
    Record.__dict__[f].__set__ for f in _RECORD_FIELDS)  # fmt: skip


def make_record(
    op: Op, seq: int, time_us: int, job_id: int, tube: str = "", pri: int = 0, delay: int = 0,
    ttr: int = 0, deadline_us: int = 0, body: bytes = b"", created_us: int = 0,
) -> Record:  # fmt: skip
    """``Record(op, seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body,
    created_us=created_us)``, about twice as fast: the frozen dataclass's ``__init__`` pays an
    ``object.__setattr__`` lookup and call per field (17) for every record the engine writes.
    Slots are set through their descriptors instead; the result compares equal to the
    constructor's (tests/engine/test_fast_values.py).

    >>> make_record(Op.DELETE, 3, 10, 7) == Record(Op.DELETE, 3, 10, 7)
    True
    """
    r: Record = _new(Record)
    _s_op(r, op)
    _s_seq(r, seq)
    _s_time(r, time_us)
    _s_job(r, job_id)
    _s_tube(r, tube)
    _s_pri(r, pri)
    _s_delay(r, delay)
    _s_ttr(r, ttr)
    _s_deadline(r, deadline_us)
    _s_body(r, body)
    _s_state(r, READY)
    _s_created(r, created_us)
    _s_reserves(r, 0)
    _s_timeouts(r, 0)
    _s_releases(r, 0)
    _s_buries(r, 0)
    _s_kicks(r, 0)
    _s_epoch(r, 0)
    _s_start(r, 0)
    return r


def inserted(jid: int) -> C.Reply:
    """``Reply("INSERTED", (jid,))`` without the frozen dataclass's per-field ``__setattr__``
    (tests/engine/test_fast_values.py checks it equals the constructor's result)."""
    r: C.Reply = _new(C.Reply)
    _set_word(r, "INSERTED")
    _set_args(r, (jid,))
    return r


def reserved(j: Job) -> C.JobReply:
    """``JobReply("RESERVED", j.id, j.body)``, built as ``inserted`` is."""
    r: C.JobReply = _new(C.JobReply)
    _set_jword(r, "RESERVED")
    _set_jid(r, j.id)
    _set_jbody(r, j.body)
    return r
