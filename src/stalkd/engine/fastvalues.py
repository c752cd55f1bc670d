"""Hot replies built by setting slots directly (the engine's per-command values).

A frozen dataclass's ``__init__`` pays an ``object.__setattr__`` lookup and call per field; the
engine builds one reply per command, so these build the same values through the slots'
descriptors instead. tests/engine/test_fast_values.py checks that each equals (and hashes as)
what the constructor builds. (Records need no such help: compiled, ``Record`` is an extension
type whose constructor is one C call; model.pxd.)

Ensures: ``inserted(i)`` and ``reserved(j)`` equal ``Reply("INSERTED", (i,))`` and
``JobReply("RESERVED", j.id, j.body)``.
"""

from __future__ import annotations

from stalkd.engine.objects import Job
from stalkd.protocol import commands as C

__all__ = ["inserted", "reserved"]

_new = object.__new__
_set_word = C.Reply.__dict__["word"].__set__
_set_args = C.Reply.__dict__["args"].__set__
_set_jword = C.JobReply.__dict__["word"].__set__
_set_jid = C.JobReply.__dict__["id"].__set__
_set_jbody = C.JobReply.__dict__["body"].__set__


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
