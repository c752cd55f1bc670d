"""A standby's apply step (``Reservations.follow``): the primary's records replayed in order, and
the reservations among them noted, exactly as replaying and noting them one at a time does; at
promotion the jobs still reserved on the old primary are held until their TTR ends."""

from __future__ import annotations

from stalkd.engine import Engine
from stalkd.engine.handover import Reservations
from stalkd.engine.model import Op, Record
from stalkd.engine.objects import US
from stalkd.engine.replay import durable_records, replay

T0 = 1_000 * US


def history() -> list[Record]:
    seq = iter(range(1, 1_000))

    def rec(op: Op, jid: int, at: int = 0, **kw: object) -> Record:
        return Record(op, next(seq), T0 + at * US, jid, **kw)  # type: ignore[arg-type]

    out = [rec(Op.PUT, j, tube=f"t{j % 3}", pri=j, ttr=30 + j, body=b"job %d" % j) for j in range(1, 9)]
    out += [
        rec(Op.RESERVE, 1, 1), rec(Op.RESERVE, 2, 1), rec(Op.TOUCH, 2, 5), rec(Op.RESERVE, 3, 2),
        rec(Op.DELETE, 3, 3), rec(Op.RESERVE, 4, 2), rec(Op.RELEASE, 4, 3, pri=7, delay=10, deadline_us=T0 + 13 * US),
        rec(Op.RESERVE, 5, 4), rec(Op.BURY, 5, 4, pri=9), rec(Op.KICK, 5, 6), rec(Op.RESERVE, 6, 6),
        rec(Op.TIMEOUT, 6, 40), rec(Op.RESERVE, 7, 7), rec(Op.RESERVE, 99, 7),  # a job this copy never had
        rec(Op.EPOCH, 0, 8, epoch=1, start_offset=40), rec(Op.RESULT, 8, 9, deadline_us=T0 + 99 * US, body=b"ok"),
    ]  # fmt: skip
    return out


def one_at_a_time(records: list[Record]) -> tuple[Engine, Reservations]:
    e, res = Engine(), Reservations()
    for r in records:
        replay(e, r)
        res.see(r, e)
    return e, res


def test_follow_gives_what_replaying_and_noting_each_record_gives() -> None:
    records = history()
    want_e, want = one_at_a_time(records)
    e, res = Engine(), Reservations()
    res.follow(e, records[:5])  # in slices, as the receiver applies them
    res.follow(e, records[5:])
    assert list(durable_records(e)) == list(durable_records(want_e))
    assert (e.seq, e.next_id, e.epochs, e.body_bytes) == (want_e.seq, want_e.next_id, want_e.epochs, want_e.body_bytes)
    assert res.until == want.until
    # 1 reserved, 2 touched at +5 s (its TTR 32 s from then), 7 reserved; the others ended
    assert res.until == {1: T0 + 1 * US + 31 * US, 2: T0 + 5 * US + 32 * US, 7: T0 + 7 * US + 37 * US}


def test_at_promotion_the_jobs_still_reserved_are_held_until_their_ttr_ends() -> None:
    e, res = Engine(), Reservations()
    res.follow(e, history())
    held = res.hold(e, (T0 + 20 * US) / US)  # job 1's TTR ended at +32 s: still held at +20 s
    assert held == 3
    assert {j: (e.jobs[j].state.name, e.jobs[j].deadline_us) for j in (1, 2, 7)} == {
        1: ("RESERVED", T0 + 32 * US), 2: ("RESERVED", T0 + 37 * US), 7: ("RESERVED", T0 + 44 * US),
    }  # fmt: skip
    assert e.jobs[4].state.name == "DELAYED" and e.jobs[5].state.name == "READY" and 3 not in e.jobs
