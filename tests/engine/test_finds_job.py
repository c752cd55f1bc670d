"""``Engine.finds_job``: the pre-check a server runs before reserving WAL room, so that a command
naming a job the connection does not hold gets NOT_FOUND (as in beanstalkd), never
OUT_OF_MEMORY. It must predict the engine's own NOT_FOUND exactly, timers included, and change
nothing."""

from __future__ import annotations

import random

import pytest

from stalkd.engine import commands as C
from stalkd.engine.wal import Wal

from .harness import T0, Harness

NF = C.Reply("NOT_FOUND")


def _setup() -> Harness:
    # Given job 1 reserved by conn 1 (TTR 10 s), job 2 ready, job 3 buried, job 4 delayed 30 s
    h = Harness()
    for _ in range(4):
        h.do(1, C.Put(0, 0, 10, b"x"))
    h.do(1, C.ReserveJob(3))
    h.do(1, C.Bury(3, 0))
    h.do(1, C.ReserveJob(4))
    h.do(1, C.Release(4, 0, 30))
    h.do(1, C.ReserveJob(1))
    h.ensure(2)
    return h


CASES = [
    # (conn, command, seconds after setup, found?)
    (1, C.Bury(1, 5), 0, True),
    (2, C.Bury(1, 5), 0, False),  # held by another connection
    (1, C.Bury(2, 5), 0, False),  # ready, not reserved
    (1, C.Bury(99, 5), 0, False),  # no such job
    (1, C.Bury(1, 5), 10, False),  # its TTR ends exactly now: back to ready first
    (1, C.Release(1, 0, 60), 9.999, True),
    (2, C.Release(1, 0, 60), 0, False),
    (1, C.Release(3, 0, 60), 0, False),  # buried
    (1, C.Touch(1), 0, True),
    (2, C.Touch(1), 0, False),
    (1, C.KickJob(3), 0, True),
    (1, C.KickJob(4), 29, True),
    (1, C.KickJob(4), 30, False),  # its delay ends now: ready, nothing to kick
    (1, C.KickJob(2), 0, False),
    (1, C.KickJob(1), 0, False),
    (2, C.Delete(1), 0, False),  # reserved by another connection
    (2, C.Delete(1), 10, True),  # ... whose TTR has ended
    (1, C.Delete(1), 0, True),
    (2, C.Delete(3), 0, True),
    (2, C.ReserveJob(1), 0, False),
    (2, C.ReserveJob(4), 0, True),
    (2, C.Peek(99), 0, True),  # not a job command: never asked to refuse
]


@pytest.mark.parametrize(("cid", "cmd", "later", "found"), CASES)
def test_prediction_matches_the_reply(cid: int, cmd: C.Command, later: float, found: bool) -> None:
    h = _setup()
    now = T0 + later
    seq, counts, next_id = h.e.seq, dict(h.e.cmd), h.e.next_id
    assert h.e.finds_job(cid, cmd, now) is found
    assert (h.e.seq, h.e.cmd, h.e.next_id) == (seq, counts, next_id)  # it changed nothing
    h.now = now
    reply = h.do(cid, cmd)
    if type(cmd) is not C.Peek:
        assert (reply != NF) is found


@pytest.mark.parametrize("seed", range(4))
def test_prediction_matches_over_random_histories(seed: int) -> None:
    """Random commands from three connections with clock jumps that land on TTR and delay
    boundaries: before each job command, finds_job says exactly whether it will be NOT_FOUND."""
    rng = random.Random(seed)
    h = Harness()
    checked = 0
    for _ in range(1500):
        cid = rng.randint(1, 3)
        jid = rng.randint(max(1, h.e.next_id - 8), h.e.next_id)
        k = rng.random()
        if k < 0.2:
            h.do(cid, C.Put(rng.randint(0, 5), rng.choice([0, 0, 1, 2]), rng.choice([1, 2, 3]), b"j"))
            continue
        if k < 0.3:
            h.do(cid, C.ReserveWithTimeout(0))
            continue
        if k < 0.4:
            h.now += rng.choice([0.5, 1.0, 1.0, 2.0])  # whole seconds hit deadlines exactly
            h.e.tick(h.now)
            continue
        cmd = rng.choice([C.Bury(jid, 1), C.Release(jid, 2, rng.choice([0, 1])), C.Touch(jid),
                          C.Delete(jid), C.KickJob(jid), C.ReserveJob(jid)])  # fmt: skip
        if rng.random() < 0.5:  # let a deadline pass without a tick: apply must run it first
            h.now += rng.choice([1.0, 2.0])
        predicted = h.e.finds_job(cid, cmd, h.now)
        assert (h.do(cid, cmd) != NF) is predicted, (cid, cmd)
        checked += 1
    assert checked > 500


def test_on_a_full_wal_not_found_wins_over_out_of_memory(tmp_path: object) -> None:
    """The server's order with a WAL whose disk is full: ask finds_job, reserve room only for a
    command that finds its job. A bury of a job the connection does not hold replies
    NOT_FOUND and changes nothing; one it holds is refused for room (OUT_OF_MEMORY)."""
    import errno

    def enospc(step: str) -> None:
        if step == "space-allocate":
            raise OSError(errno.ENOSPC, "No space left on device (injected)")

    wal = Wal.open(str(tmp_path), durability="never", segment_size=8192, fault=enospc)
    e, _ = wal.recover(T0)
    e.connect(1, T0)
    e.connect(2, T0)
    while True:  # fill the active segment until a put is refused for room
        if not wal.admit(2000):
            break
        out = e.apply(1, C.Put(0, 0, 60, b"y" * 1500), T0)
        wal.settle(2000, out.records)
        wal.write(out.records)
    jid = next(iter(e.jobs))
    e.apply(1, C.ReserveJob(jid), T0)
    short = 64  # any non-zero room a bury would need

    def run(cid: int, cmd: C.Command) -> C.AnyReply | None:
        if e.finds_job(cid, cmd, T0) and not wal.admit(short):
            return C.Reply("OUT_OF_MEMORY")
        return e.apply(cid, cmd, T0).reply

    while wal.admit(short):  # promise away what room is left: the next bury cannot fit
        pass
    seq = e.seq
    assert run(2, C.Bury(jid, 1)) == NF
    assert run(1, C.Bury(10**6, 1)) == NF
    assert e.seq == seq
    assert run(1, C.Bury(jid, 1)) == C.Reply("OUT_OF_MEMORY")
    wal.close()
