"""Compiled, the engine's values are extension types (Records: model.pxd; replies and
commands: protocol/commands.pxd); they must keep the contract of the uncompiled classes, and an
engine with ``records=False`` must behave exactly as one that records."""

from __future__ import annotations

import dataclasses
import random

import pytest

from stalkd.engine import Engine
from stalkd.engine.model import Op, Record, decode, encode
from stalkd.protocol import commands as C


def test_record_is_a_frozen_dataclass_on_either_build() -> None:
    # compiled, Record is an extension type (model.pxd); the dataclass's contract still holds
    args = dict(tube="emails", pri=7, delay=3, ttr=60, deadline_us=123, body=b"hi", created_us=10)
    r = Record(Op.PUT, 5, 10, 42, **args)  # type: ignore[arg-type]
    assert [f.name for f in dataclasses.fields(Record)][:4] == ["op", "seq", "time_us", "job_id"]
    assert r == Record(Op.PUT, 5, 10, 42, **args) and hash(r) == hash(Record(Op.PUT, 5, 10, 42, **args))  # type: ignore[arg-type]
    assert r != dataclasses.replace(r, pri=8)
    assert decode(encode(r)) == r
    assert repr(Record(Op.DELETE, 1, 2, 3)).startswith("Record(op=<Op.DELETE: 2>, seq=1, time_us=2, job_id=3,")
    with pytest.raises(AttributeError):
        r.seq = 6  # type: ignore[misc]


def test_engine_replies_equal_constructor() -> None:
    e = Engine()
    e.connect(1, 0.0)
    put = e.apply(1, C.Put(0, 0, 60, b"body"), 0.0).reply
    assert type(put) is C.Reply and put == C.Reply("INSERTED", (1,)) and hash(put) == hash(("INSERTED", (1,)))
    got = e.apply(1, C.Reserve(), 0.0).reply
    assert type(got) is C.JobReply and got == C.JobReply("RESERVED", 1, b"body")
    assert repr(got) == "JobReply(word='RESERVED', id=1, body=b'body')"


def _script(seed: int) -> list[tuple[int, C.Command, float]]:
    rnd = random.Random(seed)
    out: list[tuple[int, C.Command, float]] = []
    now = 100.0
    for _ in range(400):
        now += rnd.choice((0.0, 0.3, 1.1))
        conn = rnd.choice((1, 2))
        jid = rnd.randint(1, 30)
        choices: list[C.Command] = [
            C.Put(rnd.randint(0, 2000), rnd.choice((0, 0, 1)), rnd.choice((1, 2, 60)), b"x" * rnd.randint(0, 5)),
            C.ReserveWithTimeout(0), C.Delete(jid), C.Release(jid, 5, rnd.choice((0, 1))), C.Bury(jid, 1),
            C.Touch(jid), C.Kick(3), C.KickJob(jid), C.Use(rnd.choice(("default", "a"))),
            C.Watch("a"), C.Ignore("default"), C.PeekBuried(), C.StatsTube("a"),
        ]  # fmt: skip
        out.append((conn, rnd.choice(choices), now))
    return out


def test_records_off_behaves_identically() -> None:
    for seed in range(5):
        on, off = Engine(), Engine(records=False)
        for e in (on, off):
            e.connect(1, 100.0)
            e.connect(2, 100.0)
        saw_records = False
        for conn, cmd, now in _script(seed):
            a, b = on.apply(conn, cmd, now), off.apply(conn, cmd, now)
            saw_records = saw_records or bool(a.records)
            assert b.records == ()
            assert (a.reply, a.wakeups, a.next_deadline) == (b.reply, b.wakeups, b.next_deadline), (seed, cmd)
            assert on.seq == off.seq
        assert saw_records
        ta, tb = on.tick(1000.0), off.tick(1000.0)
        assert (ta.reply, ta.wakeups) == (tb.reply, tb.wakeups)
        assert sorted(on.jobs) == sorted(off.jobs)
