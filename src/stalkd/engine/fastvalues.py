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

from stalkd.engine.model import Op, Record
from stalkd.engine.objects import Job
from stalkd.protocol import commands as C

__all__ = ["inserted", "make_record", "reserved"]

_new = object.__new__
_set_word = C.Reply.__dict__["word"].__set__
_set_args = C.Reply.__dict__["args"].__set__
_set_jword = C.JobReply.__dict__["word"].__set__
_set_jid = C.JobReply.__dict__["id"].__set__
_set_jbody = C.JobReply.__dict__["body"].__set__

# Record's fields, from the dataclass itself: those make_record takes, in order, then the rest
# at their defaults.
_GIVEN = ("op", "seq", "time_us", "job_id", "tube", "pri", "delay", "ttr", "deadline_us", "body", "created_us")
_SETTERS = tuple(Record.__dict__[name].__set__ for name in _GIVEN)
_DEFAULTS = tuple((Record.__dict__[f.name].__set__, f.default) for f in dataclasses.fields(Record)
                  if f.name not in _GIVEN)  # fmt: skip


def make_record(
    op: Op, seq: int, time_us: int, job_id: int, tube: str = "", pri: int = 0, delay: int = 0,
    ttr: int = 0, deadline_us: int = 0, body: bytes = b"", created_us: int = 0,
) -> Record:  # fmt: skip
    """``Record(op, seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body,
    created_us=created_us)``, faster: the frozen dataclass's ``__init__`` pays an
    ``object.__setattr__`` lookup and call per field for every record the engine writes.
    Slots are set through their descriptors instead; the result compares equal to the
    constructor's (tests/engine/test_fast_values.py).

    >>> make_record(Op.DELETE, 3, 10, 7) == Record(Op.DELETE, 3, 10, 7)
    True
    """
    r: Record = _new(Record)
    given = (op, seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body, created_us)
    for put, value in zip(_SETTERS, given, strict=True):
        put(r, value)
    for put, value in _DEFAULTS:
        put(r, value)
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
