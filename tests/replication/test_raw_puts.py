"""A standby applies each PUT from its payload (``frames.check_payloads`` hands
version-1 PUTs over as their bytes, ``Reservations.follow`` applies them with
``replay.replay_put``): the engine it builds is the one decoding every record and replaying it
gives, job for job (state, timers, counters, seq, ids), and a PUT it cannot take is refused
with the decoder's reason, or raises replay's error."""

from __future__ import annotations

import random

import pytest

from stalkd.engine import Engine
from stalkd.engine.handover import Reservations
from stalkd.engine.model import JobState, Op, Record, decode, encode
from stalkd.engine.objects import US
from stalkd.engine.replay import ReplayError, durable_records, replay, replay_put
from stalkd.replication.frames import check_payloads, check_records
from stalkd.replication.wire import WireError

T0 = 1_000 * US


def history(seed: int, n: int = 600) -> list[bytes]:
    """Payloads of a random run: puts (ready, delayed, urgent or not, in many tubes) among the
    other records a primary writes about them."""
    rng = random.Random(seed)
    out: list[Record] = []
    live: list[int] = []
    jid = 0
    for seq in range(1, n + 1):
        at = T0 + seq * 1000
        if not live or rng.random() < 0.6:
            jid += rng.choice((1, 1, 1, 7, 5000))  # ids skip (other chunks of the job table)
            delayed = rng.random() < 0.3
            out.append(Record(Op.PUT, seq, at, jid, f"tube-{rng.randrange(70)}", rng.choice((0, 5, 1023, 1024, 2**32 - 1)),
                              7 if delayed else 0, rng.randrange(1, 120), at + 7 * US if delayed else 0,
                              rng.randbytes(rng.randrange(200)), created_us=at))  # fmt: skip
            live.append(jid)
            continue
        j = rng.choice(live)
        op = rng.choice((Op.RESERVE, Op.DELETE, Op.RELEASE, Op.BURY, Op.KICK, Op.TOUCH, Op.TIMEOUT))
        if op is Op.DELETE:
            live.remove(j)
        out.append(Record(op, seq, at, j, pri=rng.randrange(2000), delay=3 if op is Op.RELEASE else 0,
                          deadline_us=at + 3 * US if op is Op.RELEASE and rng.random() < 0.5 else 0))  # fmt: skip
    return [encode(r) for r in out]


def state(e: Engine) -> tuple[object, ...]:
    jobs = [(j.id, j.state, j.deadline_us, j.tube.name, j.hpos >= 0) for j in e.jobs.values()]
    tubes = sorted((t.name, len(t.ready), len(t.delayed), len(t.buried), t.urgent, t.timer_at) for t in e.state.tube_order)
    return (list(durable_records(e)), sorted(jobs), tubes, e.seq, e.next_id, e.state.body_bytes)


@pytest.mark.parametrize("seed", range(6))
def test_applying_puts_from_their_payloads_builds_the_engine_replay_builds(seed: int) -> None:
    payloads = history(seed)
    want = Engine()
    for p in payloads:
        replay(want, decode(p))
    e, res, first = Engine(), Reservations(), 0
    for cut in range(0, len(payloads), 97):  # in slices, as the receiver takes them
        part = payloads[cut:cut + 97]
        res.follow(e, check_payloads(first, part, first, 0))
        first += len(part)
    assert state(e) == state(want)
    # and one at a time, straight from the payload
    e2 = Engine()
    for p in payloads:
        if p[1] == Op.PUT:
            replay_put(e2, p)
        else:
            replay(e2, decode(p))
    assert state(e2) == state(want)


def test_a_delayed_put_from_its_payload_asks_for_a_step() -> None:
    e, res = Engine(), Reservations()
    ready = encode(Record(Op.PUT, 1, T0, 1, "t", 0, 0, 60, 0, b"a", created_us=T0))
    delayed = encode(Record(Op.PUT, 2, T0, 2, "t", 0, 5, 60, T0 + 5 * US, b"b", created_us=T0))
    res.follow(e, check_payloads(0, [ready], 0, 0))  # (the first follow always asks)
    another = encode(Record(Op.PUT, 3, T0, 3, "t", 0, 0, 60, 0, b"c", created_us=T0))
    assert not res.follow(e, check_payloads(1, [another], 1, 0))  # ready, no waiter: no step
    assert res.follow(e, check_payloads(2, [delayed], 2, 0))
    assert e.jobs[2].state is JobState.DELAYED and e.jobs[2].deadline_us == T0 + 5 * US


def test_a_put_of_a_job_that_exists_raises_replays_error() -> None:
    p = encode(Record(Op.PUT, 4, T0, 9, "t", 0, 0, 60, 0, b"x", created_us=T0))
    want = Engine()
    replay(want, decode(p))
    with pytest.raises(ReplayError) as expected:
        replay(want, decode(p))
    e, res = Engine(), Reservations()
    res.follow(e, check_payloads(0, [p], 0, 0))
    before = state(e)
    with pytest.raises(ReplayError) as got:
        res.follow(e, check_payloads(1, [p], 1, 0))
    assert str(got.value) == str(expected.value) == "record seq 4: PUT of job 9, which already exists"
    assert res.tick_due
    # the same job again, in a tube nobody named before: no tube is left behind
    other = encode(Record(Op.PUT, 5, T0, 9, "elsewhere", 0, 0, 60, 0, b"y", created_us=T0))
    with pytest.raises(ReplayError, match="record seq 5: PUT of job 9, which already exists"):
        replay_put(e, other)
    assert "elsewhere" not in e.state.tubes
    assert state(e)[1:3] == before[1:3]  # (the same jobs and tubes; seq moved, as replay moves it)


def damaged() -> list[bytes]:
    good = encode(Record(Op.PUT, 5, 6, 7, "tube", 1, 2, 3, 4, b"body", created_us=6))
    out = [good[:n] for n in range(len(good))] + [good + b"!"]
    for at, value in ((48, b"\xe9"), (46, (4000).to_bytes(2, "little")), (52, (5).to_bytes(4, "little"))):
        bad = bytearray(good)
        bad[at:at + len(value)] = value
        out.append(bytes(bad))
    return out


@pytest.mark.parametrize("payload", damaged())
def test_a_damaged_put_is_refused_as_check_records_refuses_it(payload: bytes) -> None:
    with pytest.raises(WireError) as plain:
        check_records(3, [payload], 3, 0)
    with pytest.raises(WireError) as raw:
        check_payloads(3, [payload], 3, 0)
    assert str(raw.value) == str(plain.value)


def test_replay_put_takes_what_decode_takes_whatever_the_payload() -> None:
    """Given a payload check_records would not hand it (another version, a record that does not
    add up), replay_put does what replay of decode does: it raises decode's error."""
    for p in damaged():
        try:
            replay(Engine(), decode(p))
        except Exception as e:  # noqa: BLE001 - the same error, whatever it is
            want: object = (type(e), str(e))
        else:
            want = None
        try:
            replay_put(Engine(), p)
        except Exception as e:  # noqa: BLE001
            got: object = (type(e), str(e))
        else:
            got = None
        assert got == want
