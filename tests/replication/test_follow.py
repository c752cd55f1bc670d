"""A standby's apply step (``Reservations.follow``): the primary's records replayed in order, and
the reservations among them noted, exactly as replaying and noting them one at a time does; at
promotion the jobs still reserved on the old primary are held until their TTR ends."""

from __future__ import annotations

import pytest

from stalkd.engine import Engine
from stalkd.engine.handover import Reservations
from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.objects import US
from stalkd.engine.replay import ReplayError, durable_records, replay
from stalkd.engine.state import Outcome
from stalkd.protocol import commands as C

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


# --- when a standby's apply step needs an engine step (``tick_due``) ---------------------------


def test_the_first_follow_asks_for_a_step_and_ready_puts_after_it_do_not() -> None:
    e, res = Engine(), Reservations()
    put = [Record(Op.PUT, j, T0, j, "t", body=b"x") for j in range(1, 4)]
    assert res.follow(e, put[:1]) is True and res.tick_due is True  # what the server knows is unknown
    assert res.follow(e, put[1:]) is False and res.tick_due is False


def test_a_record_that_brings_a_timer_sooner_asks_for_a_step_and_one_that_moves_it_later_does_not() -> None:
    e, res = Engine(), Reservations()
    seq = iter(range(1, 100))

    def step(op: Op, jid: int, **kw: object) -> bool:
        return res.follow(e, [Record(op, next(seq), T0, jid, **kw)])  # type: ignore[arg-type]

    step(Op.PUT, 1, tube="t", ttr=60)
    assert step(Op.PUT, 2, tube="t", deadline_us=T0 + 10 * US) is True  # a first timer
    assert step(Op.PUT, 3, tube="u", deadline_us=T0 + 20 * US) is False  # later than job 2's
    assert step(Op.PUT, 4, tube="u", deadline_us=T0 + 5 * US) is True  # sooner, in another tube
    assert step(Op.RESERVE, 1) is False and step(Op.TOUCH, 1) is False  # (reservations are not timers here)
    assert step(Op.RELEASE, 1, pri=3, delay=2, deadline_us=T0 + 2 * US) is True  # released with a delay, sooner
    assert step(Op.DELETE, 1) is False  # the soonest gone: the timer moves later
    assert step(Op.KICK, 4) is False and step(Op.BURY, 2, pri=1) is False
    assert step(Op.JOB, 7, tube="t", state=JobState.DELAYED, deadline_us=T0 + 1 * US) is True  # a copy's job
    assert step(Op.RESULT, 3, deadline_us=T0 + 99 * US, body=b"ok") is True  # expired results' memory
    assert step(Op.EPOCH, 0, epoch=1, start_offset=40) is False


def test_a_ready_job_for_a_waiting_reserver_asks_for_a_step() -> None:
    e, res = Engine(), Reservations()
    res.follow(e, [Record(Op.PUT, 1, T0, 1, "t", body=b"x")])
    e.connect(1, T0 / US)
    e.apply(1, C.Watch("w"), T0 / US)
    assert e.apply(1, C.Reserve(), T0 / US).reply is None  # waits
    assert res.follow(e, [Record(Op.PUT, 2, T0, 2, "t", body=b"y")]) is False
    assert res.follow(e, [Record(Op.PUT, 3, T0, 3, "w", body=b"z")]) is True


def test_a_record_that_raises_leaves_a_step_asked_for() -> None:
    e, res = Engine(), Reservations()
    res.follow(e, [Record(Op.PUT, 1, T0, 1, "t", body=b"x")])
    res.follow(e, [Record(Op.PUT, 2, T0, 2, "t", body=b"x")])
    assert res.tick_due is False
    with pytest.raises(ReplayError):
        res.follow(e, [Record(Op.PUT, 3, T0, 1, "t", body=b"again")])  # job 1 exists
    assert res.tick_due is True


class _Server:
    """What the server does with an engine's steps (server/app.py): its loop timer is re-armed
    at an outcome's ``next_deadline`` when that is sooner, and runs ``tick`` when due."""

    def __init__(self, e: Engine) -> None:
        self.e = e
        self.timer_at: float | None = None
        self.steps = 0
        self.woken: list[tuple[float, int, object]] = []

    def handle(self, out: Outcome, now: float) -> None:
        self.woken += [(now, cid, getattr(r, "id", r)) for cid, r in out.wakeups]
        d = out.next_deadline
        if d is not None and (self.timer_at is None or d < self.timer_at):
            self.timer_at = d

    def applied(self, now: float) -> None:
        self.steps += 1
        self.handle(self.e.tick(now), now)

    def run_timers(self, until: float) -> None:
        while self.timer_at is not None and self.timer_at <= until:
            at, self.timer_at = self.timer_at, None
            self.handle(self.e.tick(at), at)


def test_a_standby_that_steps_only_when_asked_shows_what_one_that_steps_after_every_read_shows() -> None:
    """Delayed puts, a release with a delay, a waiting reserver, results: the jobs become ready at
    their time, and the waiter is served, as when every read ran a step (the former standby)."""
    seq = iter(range(1, 1_000))

    def rec(op: Op, jid: int, at: float, **kw: object) -> Record:
        return Record(op, next(seq), T0 + int(at * US), jid, **kw)  # type: ignore[arg-type]

    reads = [  # (when the standby applies it, s after T0; its records)
        (0.0, [rec(Op.PUT, 1, 0, tube="t", ttr=60), rec(Op.PUT, 2, 0, tube="t", deadline_us=T0 + 10 * US),
               rec(Op.PUT, 3, 0, tube="t")]),
        (0.5, [rec(Op.PUT, 4, 0.5, tube="t"), rec(Op.RESERVE, 1, 0.5)]),
        (1.0, [rec(Op.RELEASE, 1, 1, pri=5, delay=6, deadline_us=T0 + 7 * US)]),  # sooner than job 2
        (2.0, [rec(Op.PUT, 5, 2, tube="u", deadline_us=T0 + 20 * US)]),
        (3.0, [rec(Op.RESULT, 3, 3, deadline_us=T0 + 4 * US, body=b"ok")]),
        (8.0, [rec(Op.DELETE, 2, 8)]),  # due at +10 s: now never
        (9.0, [rec(Op.PUT, 6, 9, tube="w")]),  # the waiter's tube
        (9.5, [rec(Op.PUT, 7, 9.5, tube="w", deadline_us=T0 + 12 * US)]),
        (30.0, [rec(Op.PUT, 8, 30, tube="t", deadline_us=T0 + 25 * US)]),  # applied late: due at once
    ]  # fmt: skip

    def run(every_read: bool) -> tuple[list[dict[int, str]], _Server]:
        e, res = Engine(), Reservations()
        srv = _Server(e)
        e.connect(1, T0 / US)
        e.apply(1, C.Watch("w"), T0 / US)
        srv.handle(e.apply(1, C.Reserve(), T0 / US), T0 / US)
        seen = []
        for at, records in reads:
            now = (T0 + at * US) / US
            srv.run_timers(now)
            if res.follow(e, records) or every_read:
                srv.applied(now)
            seen.append({jid: j.state.name for jid, j in sorted(e.jobs.items())})
        srv.run_timers((T0 + 40 * US) / US)
        seen.append({jid: j.state.name for jid, j in sorted(e.jobs.items())})
        return seen, srv

    lazy, lazy_srv = run(every_read=False)
    eager, eager_srv = run(every_read=True)
    assert lazy == eager
    assert lazy_srv.woken == eager_srv.woken == [((T0 + 9 * US) / US, 1, 6)]  # served when put
    assert lazy_srv.steps < eager_srv.steps == len(reads)
    assert lazy[2][1] == "DELAYED" and lazy[5][1] == "READY"  # released at +1 s for 6 s: ready at +7 s
    assert lazy[-2][8] == "READY" and lazy[-2][7] == "READY"  # job 8 due when applied: ready at once
    assert lazy[-2][6] == "READY"  # the waiter's, back when its TTR (0 s) ended, on the server's timer
