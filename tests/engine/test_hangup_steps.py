"""A connection that hangs up holding many reserved jobs hands them back to ready a step's
budget at a time (issue 11 item 4): one hang-up with 100k jobs reserved cost one ~0.6 s step
before. Between the steps every other connection sees a state a live client could have made
by releasing its jobs one by one, most urgent first, before hanging up: job counts add up,
reserves get the jobs in beanstalkd's order, a command naming one of the jobs finds it ready,
nothing is written to the WAL, and a restart at any point finds every job ready."""

from __future__ import annotations

import random

from stalkd.engine import Engine
from stalkd.engine.model import JobState, Op
from stalkd.engine.replay import finish, replay
from stalkd.persist.snapshot import capture_order
from stalkd.protocol import commands as C

from .harness import Harness

K = 8
KEYS_PER_STEP = 16 * K  # ready keys a whole step's budget collects (state.KEYS_PER_JOB)


def _held_by(
    h: Harness, cid: int, n: int, pris: list[int] | None = None, tube: str = "default", ttr: int = 60,
) -> list[int]:
    """Put n jobs (priorities ``pris``, else all 0) on ``tube``; ``cid`` reserves them all."""
    h.do(cid, C.Use(tube))
    if tube != "default":
        h.do(cid, C.Watch(tube))
        h.do(cid, C.Ignore("default"))
    ids = []
    for i in range(n):
        r = h.do(cid, C.Put(pris[i] if pris else 0, 0, ttr, b"%d" % i))
        assert isinstance(r, C.Reply)
        ids.append(int(r.args[0]))
    for _ in range(n):
        assert isinstance(h.do(cid, C.Reserve()), C.JobReply)
    return ids


def _counts(e: Engine, tube: str = "default") -> tuple[int, int]:
    """(ready, reserved) as stats-tube reports them, read without a step."""
    t = e.tubes[tube]
    return len(t.ready), t.reserved


def _ticks(h: Harness) -> list[int]:
    """Tick at one instant until the engine is no longer behind; ready count after each."""
    seen = []
    while h.e.behind():
        h._absorb(h.e.tick(h.now))
        seen.append(_counts(h.e)[0])
        assert len(seen) < 10_000, "no progress"
    return seen


def test_a_hang_up_hands_back_at_most_k_jobs_a_step_and_says_it_is_behind() -> None:
    h = Harness(step_jobs=K)
    n = 6 * KEYS_PER_STEP + 5
    _held_by(h, 1, n)
    h.records.clear()
    # When the connection hangs up, that step hands back at most K jobs and leaves the rest
    out = h.close(1)
    assert 1 not in h.e.conns
    ready, reserved = _counts(h.e)
    assert ready <= K and ready + reserved == n
    assert out.next_deadline is not None and out.next_deadline <= h.now and h.e.behind()
    # Then each later step hands back at most K more, every job accounted for, until all are ready
    seen = _ticks(h)
    steps = [b - a for a, b in zip([ready, *seen], seen, strict=False)]
    assert max(steps) <= K and seen[-1] == n
    assert _counts(h.e) == (n, 0) and h.e.next_deadline() is None
    # And nothing was written: a reservation is not durable, nor is its end by hang-up
    assert h.records == []
    assert all(j.state is JobState.READY and j.owner is None for j in h.e.jobs.values())


def test_reserves_between_the_steps_get_the_jobs_in_beanstalkds_order() -> None:
    h = Harness(step_jobs=K)
    n = 5 * KEYS_PER_STEP
    pris = [random.Random(7).randrange(0, 2000) for _ in range(n)]
    ids = _held_by(h, 1, n, pris)
    beanstalkd_order = [i for _, i in sorted(zip(pris, ids, strict=True))]
    # Given a worker blocked in reserve when the holder hangs up
    assert h.do(2, C.Reserve()) is None
    h.close(1)
    got: list[int] = []
    # When other workers reserve one job between each two steps of the hand-back
    while len(got) < n:
        h._absorb(h.e.tick(h.now))
        got += [r.id for r in h.take_wakeups(2) if isinstance(r, C.JobReply)]
        r = h.do(3 + len(got) % 3, C.ReserveWithTimeout(0))
        if isinstance(r, C.JobReply):
            got.append(r.id)
        else:  # keys still being collected: nothing is back yet
            assert r == C.Reply("TIMED_OUT") and not got
    # Then the blocked worker got the most urgent job, and all of them came out in the order
    # beanstalkd gives them when they all come back at the hang-up
    assert got == beanstalkd_order


def test_a_command_naming_a_job_not_yet_handed_back_finds_it_ready() -> None:
    h = Harness(step_jobs=K)
    n = 4 * KEYS_PER_STEP
    ids = _held_by(h, 1, n)
    h.close(1)
    last, before_last, third = ids[-1], ids[-2], ids[-3]
    assert h.e.jobs[last].state is JobState.RESERVED  # the least urgent: back last
    h.records.clear()
    # stats-job reports it ready (and hands it back), delete deletes it, reserve-job reserves it
    st = h.do(2, C.StatsJob(last))
    assert isinstance(st, C.YamlDict) and st.values["state"] == "ready"
    assert h.do(2, C.Delete(before_last)) == C.Reply("DELETED")
    assert h.do(3, C.ReserveJob(third)) == C.JobReply("RESERVED", third, b"%d" % (n - 3))
    # while a job a live connection holds is still out of reach of the others
    assert h.do(2, C.Delete(third)) == C.Reply("NOT_FOUND")
    assert [(r.op, r.job_id) for r in h.records] == [(Op.DELETE, before_last), (Op.RESERVE, third)]
    # And the rest still come back once each, the counts exact at every step
    while h.e.behind():
        h._absorb(h.e.tick(h.now))
        ready, reserved = _counts(h.e)
        assert ready + reserved == len(h.e.jobs)
    assert _counts(h.e) == (len(h.e.jobs) - 1, 1)  # conn 3's reserve-job


def test_a_restart_or_a_snapshot_in_the_middle_finds_every_job() -> None:
    h = Harness(step_jobs=K)
    n = 3 * KEYS_PER_STEP
    pris = list(range(n, 0, -1))
    ids = _held_by(h, 1, n, pris, tube="t")
    h.close(1)
    while not _counts(h.e, "t")[0]:  # the keys are collected first
        h._absorb(h.e.tick(h.now))
    assert 0 < _counts(h.e, "t")[0] < n
    # A snapshot starting now copies every job once, the held ones too (no fallback scan)
    order = capture_order(h.e)
    assert sorted(j.id for j in order) == sorted(ids)
    assert sum(j.state is JobState.RESERVED for j in order) == _counts(h.e, "t")[1]
    # A crash now: the records written so far rebuild every job, ready, in priority order
    e2 = Engine()
    for r in h.records:
        replay(e2, r)
    finish(e2)
    t2 = e2.tubes["t"]
    assert len(t2.ready) == n and t2.reserved == 0
    assert [j.id for j in t2.ready.sorted_items()] == ids[::-1]


def test_a_tube_kept_only_by_held_jobs_stays_until_they_are_back() -> None:
    h = Harness(step_jobs=K)
    _held_by(h, 1, 3 * KEYS_PER_STEP, tube="only")
    h.close(1)
    assert "only" in h.e.tubes and h.e.behind()
    _ticks(h)
    assert _counts(h.e, "only") == (3 * KEYS_PER_STEP, 0)
    h.do(2, C.Use("only"))
    assert h.do(2, C.PeekReady()) == C.JobReply("FOUND", 1, b"0")


def test_hang_ups_and_kicks_in_progress_take_turns() -> None:
    h = Harness(step_jobs=K)
    n = 4 * KEYS_PER_STEP
    _held_by(h, 1, n, tube="held")
    h.do(2, C.Use("delayed"))
    for _ in range(n):
        h.do(2, C.Put(0, 3600, 60, b"d"))
    # A kicker whose kick is in progress hangs up: its kick ends there
    assert h.do(2, C.Kick(n)) is None
    h.close(2)
    kicked = len(h.e.tubes["delayed"].ready)
    assert 0 < kicked < n
    # Another kick and a hang-up go on side by side, neither waiting for the other to end
    h.do(3, C.Use("delayed"))
    assert h.do(3, C.Kick(n)) is None
    h.close(1)
    both = []
    while h.e.behind():
        h._absorb(h.e.tick(h.now))
        both.append((len(h.e.tubes["delayed"].ready), len(h.e.tubes["held"].ready)))
    assert any(0 < d < n and 0 < r < n for d, r in both), both
    assert both[-1] == (n, n)
    assert h.take_wakeups(3) == [C.Reply("KICKED", (n - kicked,))]


def test_held_jobs_never_time_out_while_they_wait_their_turn() -> None:
    h = Harness(step_jobs=K)
    n = 3 * KEYS_PER_STEP
    _held_by(h, 1, n, ttr=1)
    h.records.clear()
    h.close(1)
    h.now += 5  # every TTR has passed while most are still held
    _ticks(h)
    assert _counts(h.e) == (n, 0)
    assert h.records == [] and h.e.job_timeouts == 0
    assert {(j.reserves, j.timeouts) for j in h.e.jobs.values()} == {(1, 0)}


def test_a_few_jobs_are_handed_back_in_the_hang_up_step() -> None:
    h = Harness(step_jobs=K)
    _held_by(h, 1, K - 1)  # and one tube watched: K in all
    out = h.close(1)
    assert _counts(h.e) == (K - 1, 0) and out.next_deadline is None and not h.e.behind()


def test_a_hang_up_lets_go_of_many_watched_tubes_a_step_at_a_time() -> None:
    h = Harness(step_jobs=K)
    n = 5 * K + 3
    names = [f"w{i:03d}" for i in range(n)]
    for name in names:
        h.do(1, C.Watch(name))
    h.do(2, C.Watch(names[-1]))
    before = [t.name for t in h.e.tube_order]
    # When a connection watching n empty tubes hangs up, that step lets go of at most K
    h.close(1)
    assert n + 1 - len(h.e.tubes) <= K and h.e.behind()
    # Then later steps let go of at most K more each, while the tubes still listed add up
    sizes = [len(h.e.tubes)]
    while h.e.behind():
        h._absorb(h.e.tick(h.now))
        sizes.append(len(h.e.tubes))
        st = h.do(3, C.StatsTube(names[-1]))
        assert isinstance(st, C.YamlDict) and st.values["current-watching"] in (1, 2)
    assert all(0 <= a - b <= K for a, b in zip(sizes, sizes[1:], strict=False))
    # And only the tube another connection watches is left, in the order beanstalkd keeps
    assert [t.name for t in h.e.tube_order] == ["default", names[-1]]
    assert h.e.tubes[names[-1]].watching == 1
    assert before[:2] == ["default", names[0]]
