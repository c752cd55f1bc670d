"""The engine builds Records and replies by setting slots directly (fastvalues.make_record,
inserted, reserved); these must stay equal to what the dataclass constructors build, and an
engine with ``records=False`` must behave exactly as one that records."""

from __future__ import annotations

import dataclasses
import random

from stalkd.engine import Engine
from stalkd.engine import fastvalues as E
from stalkd.engine.model import Op, Record, decode, encode
from stalkd.protocol import commands as C


def test_make_record_equals_constructor_for_every_field() -> None:
    args = dict(tube="emails", pri=7, delay=3, ttr=60, deadline_us=123, body=b"hi", created_us=10)
    fast = E.make_record(Op.PUT, 5, 10, 42, **args)  # type: ignore[arg-type]
    slow = Record(Op.PUT, 5, 10, 42, **args)  # type: ignore[arg-type]
    assert fast == slow
    assert [getattr(fast, f.name) for f in dataclasses.fields(Record)] == [
        getattr(slow, f.name) for f in dataclasses.fields(Record)
    ]
    assert decode(encode(fast)) == slow
    assert E.make_record(Op.DELETE, 1, 2, 3) == Record(Op.DELETE, 1, 2, 3)


def test_fast_replies_equal_constructor() -> None:
    assert E.inserted(9) == C.Reply("INSERTED", (9,))
    assert hash(E.inserted(9)) == hash(C.Reply("INSERTED", (9,)))
    e = Engine()
    e.connect(1, 0.0)
    e.apply(1, C.Put(0, 0, 60, b"body"), 0.0)
    assert e.apply(1, C.Reserve(), 0.0).reply == C.JobReply("RESERVED", 1, b"body")
    assert E.reserved(e.jobs[1]) == C.JobReply("RESERVED", 1, b"body")


def _script(seed: int) -> list[tuple[int, C.Command, float]]:
    rnd = random.Random(seed)
    out: list[tuple[int, C.Command, float]] = []
    now = 100.0
    for _ in range(400):
        now += rnd.choice((0.0, 0.3, 1.1))
        conn = rnd.choice((1, 2))
        jid = rnd.randint(1, 30)
        cmd = rnd.choice([
            C.Put(rnd.randint(0, 2000), rnd.choice((0, 0, 1)), rnd.choice((1, 2, 60)), b"x" * rnd.randint(0, 5)),
            C.ReserveWithTimeout(0), C.Delete(jid), C.Release(jid, 5, rnd.choice((0, 1))), C.Bury(jid, 1),
            C.Touch(jid), C.Kick(3), C.KickJob(jid), C.Use(rnd.choice(("default", "a"))),
            C.Watch("a"), C.Ignore("default"), C.PeekBuried(), C.StatsTube("a"),
        ])  # fmt: skip
        out.append((conn, cmd, now))
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
