"""The compiled path of Engine.apply (stalkd.engine._engine) against the reference (engine.py).

Seeded random command sequences from several connections, with a clock that advances, hang-ups,
ticks and drain mode, run on an engine with the compiled path and on one with the reference
``apply`` only, with records on and off, with and without a WAL room that sometimes refuses.
After every call both must give the same Outcome (reply, records, wakeups, next deadline) and
have asked their rooms the same questions; every few steps and at the end their whole states
must be equal (every job's fields, tube and connection fields, every heap's keys and items in
array order, the timer heaps, counters) and so must stats, stats-tube and stats-job.
Skipped when the compiled path is not active; test_heap_build.py checks the build.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from stalkd.engine import Engine, fastengine
from stalkd.engine.jobtable import CHUNK
from stalkd.engine.model import JobState
from stalkd.engine.objects import ConnState, Job, Tube, new_jobs
from stalkd.engine.state import Outcome
from stalkd.protocol import commands as C

pytestmark = pytest.mark.skipif(fastengine.IMPLEMENTATION != "c", reason="the compiled engine path is not active")

_REFERENCE = getattr(Engine.apply, "reference", Engine.apply)


class PyEngine(Engine):
    """The engine with the reference ``apply`` only."""

    apply = _REFERENCE


class FlakyRoom:
    """A WAL room that refuses at random (seeded: two of them refuse alike) and logs each
    question, so both engines must ask the same ones in the same order."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.log: list[tuple[str, int, object]] = []

    def put(self, body_len: int) -> bool:
        ok = self.rng.random() < 0.8
        self.log.append(("put", body_len, ok))
        return ok

    def updates(self, n: int) -> int:
        got = n if self.rng.random() < 0.75 else self.rng.randint(0, n)
        self.log.append(("updates", n, got))
        return got


TUBES = ("default", "a", "b")
PRIS = (0, 1, 5, 1023, 1024, 2**32 - 1)


def _heap(h: Any, name: Any) -> tuple[list[int], list[Any], list[int]]:
    items = h.item_list()
    return h.key_list(), [name(x) for x in items], [x.hpos for x in items]


def _job(j: Job) -> tuple[Any, ...]:
    return tuple(
        (s, j.tube.name if s == "tube" else None if s == "owner" and j.owner is None
         else j.owner.id if s == "owner" and j.owner is not None else getattr(j, s))
        for s in Job.__slots__
    )  # fmt: skip


def _tube(t: Tube) -> tuple[Any, ...]:
    scalars = ("name", "serial", "pause_until_us", "pause_secs", "using", "watching", "total_jobs",
               "cmd_delete", "cmd_pause", "urgent", "reserved", "hpos", "slot")  # fmt: skip
    return (
        tuple(getattr(t, s) for s in scalars),
        _heap(t.ready, lambda j: j.id),
        _heap(t.delayed, lambda j: j.id),
        list(t.buried),
        list(t.waiting),
    )


def _conn(c: ConnState) -> tuple[Any, ...]:
    scalars = ("id", "waiting", "wait_until_us", "wait_seq", "producer", "worker", "half_closed", "hpos")
    return (
        tuple(getattr(c, s) for s in scalars),
        c.use.name,
        [t.name for t in c.watch],
        _heap(c.reserved, lambda j: j.id),
        None if c.kick is None else (c.kick[0].name, *c.kick[1:]),
        c.release is not None,
    )


def state(e: Engine) -> dict[str, Any]:
    """Everything the engine holds, by value (objects named by id or tube name)."""
    return {
        "jobs": {i: _job(j) for i, j in e.jobs.items()},
        "job_order": list(e.jobs),
        "job_chunks": e.jobs.chunks(),
        "tubes": {n: _tube(t) for n, t in e.tubes.items()},
        "tube_order": [t.name for t in e.tube_order],
        "conns": {i: _conn(c) for i, c in e.conns.items()},
        "tube_timers": _heap(e._tube_timers, lambda t: t.name),
        "conn_timers": _heap(e._conn_timers, lambda c: c.id),
        "pending": [c.id for c in e._pending],
        "dirty": sorted(t.name for t in e._dirty),
        "scalars": (e.next_id, e.seq, e.draining, e.job_timeouts, e.total_jobs, e.total_connections,
                    e.body_bytes, e._now, e._budget, e._caller, e._own, e._records, e._wakeups),
        "cmd": dict(e.cmd),
    }  # fmt: skip


def queries(e: Engine, now: float) -> list[Outcome]:
    """stats, stats-tube of every tube and stats-job of every job, from a fresh connection."""
    e.connect(999, now)
    out = [e.apply(999, C.Stats(), now)]
    out += [e.apply(999, C.StatsTube(n), now) for n in sorted(e.tubes)]
    out += [e.apply(999, C.StatsJob(i), now) for i in sorted(e.jobs)]
    e.disconnect(999, now)
    return out


def random_command(rng: random.Random, e: Engine, cid: int) -> C.Command:
    """A command for connection ``cid``, biased to the ones the compiled path runs (put,
    reserve with and without a timeout, delete, release to ready and delayed, bury, touch) and
    to ids that exist (held by ``cid`` for release, bury and touch). Reserves that find no job
    leave their connection waiting, so later puts and releases find waiters to serve."""
    ids = list(e.jobs) or [1]
    held = [j.id for j in e.conns[cid].reserved.item_list()] or ids
    jid = rng.choice(ids) if rng.random() < 0.85 else rng.randint(1, e.next_id + 1)
    own = rng.choice(held)
    r = rng.random()
    if r < 0.30:
        body = bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 5, 16, 17))))
        err = rng.choice((None,) * 12 + ("JOB_TOO_BIG", "EXPECTED_CRLF", "BAD_FORMAT"))
        delay = rng.choice((0, 0, 0, 0, 1, 3))
        return C.Put(rng.choice(PRIS), delay, rng.choice((0, 1, 2, 5, 60)), body, err)
    if r < 0.45:
        return C.Reserve() if rng.random() < 0.3 else C.ReserveWithTimeout(rng.choice((0, 0, 1, 5)))
    if r < 0.58:
        return C.Delete(own if rng.random() < 0.6 else jid)
    if r < 0.68:
        return C.Release(own if rng.random() < 0.8 else jid, rng.choice(PRIS), rng.choice((0, 0, 0, 1, 3)))
    if r < 0.76:
        return C.Bury(own, rng.choice(PRIS)) if rng.random() < 0.5 else C.Touch(own)
    choices: list[C.Command] = [
        C.Bury(own, rng.choice(PRIS)), C.Touch(own), C.Kick(rng.choice((1, 2, 10))), C.KickJob(jid),
        C.ReserveJob(jid), C.Use(rng.choice(TUBES)), C.Watch(rng.choice(TUBES)),
        C.Ignore(rng.choice(TUBES)), C.PauseTube(rng.choice(TUBES), rng.choice((0, 1, 2))),
        C.Peek(jid), C.PeekReady(), C.ListTubes(),
    ]  # fmt: skip
    return rng.choice(choices)


def run(seed: int, records: bool, with_room: bool, steps: int = 500) -> None:
    rng = random.Random(seed)
    fast = Engine(max_job_size=16, records=records, step_jobs=rng.choice((2, 5, 256)))
    ref = PyEngine(max_job_size=16, records=records, step_jobs=fast.step_jobs)
    rooms = (FlakyRoom(seed), FlakyRoom(seed)) if with_room else None
    if rooms is not None:
        fast.room, ref.room = rooms
    now = 1_700_000_000.0
    for e in (fast, ref):
        for cid in (1, 2, 3):
            e.connect(cid, now)
    next_conn = 4
    for step in range(steps):
        r = rng.random()
        if r < 0.25:
            now += rng.choice((0.0, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0, 61.0))
        live = sorted(fast.conns)
        idle = [c for c in live if not fast.conns[c].waiting and fast.conns[c].kick is None]
        r = rng.random()
        if r < 0.03 and live:
            cid = rng.choice(live)
            outs = [e.disconnect(cid, now) for e in (fast, ref)]
        elif r < 0.05:
            for e in (fast, ref):
                e.connect(next_conn, now)
            next_conn += 1
            continue
        elif r < 0.09 or not idle:
            outs = [e.tick(now) for e in (fast, ref)]
        elif r < 0.095:
            on = rng.random() < 0.3
            for e in (fast, ref):
                e.set_draining(on)
            continue
        else:
            cid = rng.choice(idle)
            cmd = random_command(rng, fast, cid)
            outs = [e.apply(cid, cmd, now) for e in (fast, ref)]
        assert outs[0] == outs[1], (seed, step)
        if rooms is not None:
            assert rooms[0].log == rooms[1].log, (seed, step)
        if step % 50 == 0:
            assert state(fast) == state(ref), (seed, step)
    assert state(fast) == state(ref), seed
    assert queries(fast, now) == queries(ref, now), seed
    assert state(fast) == state(ref), seed


@pytest.mark.parametrize("records", [False, True], ids=["memory", "records"])
@pytest.mark.parametrize("with_room", [False, True], ids=["no-room", "room"])
def test_the_compiled_path_matches_the_reference(records: bool, with_room: bool) -> None:
    ran0, declined0 = fastengine.counts()
    for seed in range(12):
        run(seed * 4 + records * 2 + with_room, records, with_room)
    ran, declined = fastengine.counts()
    # Both paths were exercised: the common commands ran compiled, the others were handed over.
    assert ran - ran0 > 1000
    assert declined - declined0 > 200


def test_apply_is_the_compiled_descriptor_and_falls_back() -> None:
    e = Engine()
    e.connect(1, 0.0)
    assert type(Engine.__dict__["apply"]).__name__ == "FastMethod"
    out = e.apply(1, C.Put(0, 5, 60, b"x"), 0.0)  # delayed: the reference runs it
    assert out.reply == C.Reply("INSERTED", (1,)) and out.next_deadline == 5.0
    assert e.apply(1, C.Reserve(), 5.0).reply == C.JobReply("RESERVED", 1, b"x")
    assert e.apply(conn_id=1, cmd=C.Delete(1), now=6.0).reply == C.Reply("DELETED")
    with pytest.raises(Exception, match="not connected"):
        e.apply(2, C.Put(0, 0, 60, b"x"), 0.0)


def test_the_common_commands_run_compiled_and_the_others_are_handed_over() -> None:
    e, ref = Engine(records=False), PyEngine(records=False)
    for cid in (1, 2):
        e.connect(cid, 0.0)
        ref.connect(cid, 0.0)
    ran0, declined0 = fastengine.counts()
    job1, job2 = C.JobReply("RESERVED", 1, b"x"), C.JobReply("RESERVED", 2, b"y")
    compiled: list[tuple[int, C.Command, float, Outcome]] = [
        (1, C.Put(0, 0, 60, b"x"), 0.0, Outcome(C.Reply("INSERTED", (1,)), (), (), None)),
        (1, C.ReserveWithTimeout(0), 0.0, Outcome(job1, (), (), 60.0)),
        (1, C.Touch(1), 10.0, Outcome(C.Reply("TOUCHED"), (), (), 70.0)),
        (1, C.Release(1, 5, 0), 10.0, Outcome(C.Reply("RELEASED"), (), (), None)),
        (1, C.Reserve(), 10.0, Outcome(job1, (), (), 70.0)),
        (1, C.Release(1, 5, 3), 10.0, Outcome(C.Reply("RELEASED"), (), (), 13.0)),  # delayed
        (1, C.ReserveWithTimeout(0), 11.0, Outcome(C.Reply("TIMED_OUT"), (), (), 13.0)),  # no job yet
        (2, C.ReserveWithTimeout(5), 11.0, Outcome(None, (), (), 13.0)),  # waits
        (1, C.Put(0, 0, 60, b"y"), 11.0, Outcome(C.Reply("INSERTED", (2,)), (), ((2, job2),), 13.0)),
        (1, C.Reserve(), 11.0, Outcome(None, (), (), 13.0)),  # waits, for ever
        (2, C.Release(2, 0, 0), 11.0, Outcome(C.Reply("RELEASED"), (), ((1, job2),), 13.0)),
        (1, C.Bury(2, 7), 12.0, Outcome(C.Reply("BURIED"), (), (), 13.0)),
    ]
    for cid, cmd, now, want in compiled:
        assert e.apply(cid, cmd, now) == want == ref.apply(cid, cmd, now), cmd
    assert fastengine.counts() == (ran0 + len(compiled), declined0)
    assert e.jobs[2].state.name == "BURIED" and e.jobs[1].state.name == "DELAYED"
    assert state(e) == state(ref)
    e.apply(1, C.Release(1, 0, 0), 12.0)  # delayed, not held: NOT_FOUND, in Python
    e.apply(1, C.Delete(9), 12.0)  # NOT_FOUND, in Python
    assert fastengine.counts() == (ran0 + len(compiled), declined0 + 2)


def test_the_job_table_is_kept_alike_across_its_chunks() -> None:
    """Puts and deletes over several of the job table's chunks: the compiled put makes a new
    chunk as the reference does, and the deletes that empty or shrink one below the newest are
    handed over."""
    e, ref = Engine(records=False), PyEngine(records=False)
    for eng in (e, ref):
        eng.connect(1, 0.0)
    rng = random.Random(34)
    live: list[int] = []
    for _ in range(4 * CHUNK):
        if live and rng.random() < 0.3:
            cmd: C.Command = C.Delete(live.pop(rng.randrange(len(live))))
        else:
            cmd = C.Put(rng.randrange(2048), 0, 60, b"x")
        got = e.apply(1, cmd, 0.0)
        assert got == ref.apply(1, cmd, 0.0), cmd
        if isinstance(cmd, C.Put):
            live.append(int(got.reply.args[0]))  # type: ignore[union-attr]
    rng.shuffle(live)
    for jid in live:
        assert e.apply(1, C.Delete(jid), 0.0) == ref.apply(1, C.Delete(jid), 0.0)
        if jid % 97 == 0:
            assert state(e) == state(ref)
    assert state(e) == state(ref) and not e.jobs
    top = (e.next_id - 1) // CHUNK  # the newest chunk stays, empty; the others are gone
    assert e.jobs.chunks() == ref.jobs.chunks() == [(top, 0), (top, -1)] and e.next_id > 2 * CHUNK


def test_jobs_made_in_bulk_are_the_jobs_job_makes() -> None:
    """A snapshot block's jobs built by the compiled ``new_jobs`` equal ``objects.new_jobs``'s,
    slot by slot; columns of different lengths are refused."""
    t = Tube("t", 1)
    cols = ((3, 9, 1 << 40), t, (0, 5, 2**32 - 1), (0, 1, 7), (1, 60, 3600), (b"", b"ab", b"c" * 300),
            JobState.DELAYED, (10, -1, 2**62))  # fmt: skip
    fast, ref = fastengine.job_maker()(*cols), new_jobs(*cols)
    assert fastengine.job_maker() is not new_jobs and len(fast) == 3
    assert [[getattr(j, s) for s in Job.__slots__] for j in fast] == [[getattr(j, s) for s in Job.__slots__] for j in ref]
    with pytest.raises(ValueError, match="lengths"):
        fastengine.job_maker()((1, 2), t, (0,), (0,), (0,), (b"",), JobState.READY, (0,))
