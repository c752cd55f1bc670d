"""``Engine.room``: WAL room is asked for after the command's own job look-up, so a command
naming a job the connection cannot act on gets NOT_FOUND (as in beanstalkd), never
OUT_OF_MEMORY, and a refusal changes nothing. The look-ups and costs come from the command
table, the same look-ups the handlers use, timers included."""

from __future__ import annotations

import random

import pytest

from stalkd.persist.wal import Wal
from stalkd.protocol import commands as C
from stalkd.server.admission import Admission

from .harness import T0, Harness

NF = C.Reply("NOT_FOUND")
OOM = C.Reply("OUT_OF_MEMORY")


class CountingRoom:
    """Grants (or refuses) every request and counts them."""

    def __init__(self, grant: bool) -> None:
        self.grant = grant
        self.asked = 0

    def put(self, body_len: int) -> bool:
        self.asked += 1
        return self.grant

    def updates(self, n: int) -> int:
        self.asked += 1
        return n if self.grant else 0


def _setup(room: CountingRoom) -> Harness:
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
    h.e.room = room
    return h


CASES = [
    # (conn, command, seconds after setup, reply on a full disk, was room asked for?)
    (1, C.Bury(1, 5), 0, OOM, True),
    (2, C.Bury(1, 5), 0, NF, False),  # held by another connection
    (1, C.Bury(2, 5), 0, NF, False),  # ready, not reserved
    (1, C.Bury(99, 5), 0, NF, False),  # no such job
    (1, C.Bury(1, 5), 10, NF, False),  # its TTR ends exactly now: back to ready first
    (1, C.Release(1, 0, 60), 9.999, OOM, True),  # a delayed release needs room
    (1, C.Release(1, 0, 0), 0, C.Reply("RELEASED"), True),  # to ready: applied, not logged
    (2, C.Release(1, 0, 60), 0, NF, False),
    (1, C.Release(3, 0, 60), 0, NF, False),  # buried
    (1, C.KickJob(3), 0, NF, True),  # found, but no room: beanstalkd replies NOT_FOUND
    (1, C.KickJob(4), 30, NF, False),  # its delay ends now: ready, nothing to kick
    (1, C.KickJob(2), 0, NF, False),
    (1, C.Kick(5), 0, C.Reply("KICKED", (0,)), True),
    (1, C.Put(0, 0, 60, b"y"), 0, OOM, True),
]


@pytest.mark.parametrize(("cid", "cmd", "later", "full_reply", "asked"), CASES)
def test_a_full_disk_refuses_after_the_look_up_and_changes_nothing(
    cid: int, cmd: C.Command, later: float, full_reply: C.AnyReply, asked: bool
) -> None:
    room = CountingRoom(grant=False)
    h = _setup(room)
    h.now = T0 + later
    h.e.tick(h.now)
    states = {j.id: (j.state, j.pri) for j in h.e.iter_jobs()}
    next_id, records = h.e.next_id, len(h.records)
    assert h.do(cid, cmd) == full_reply
    assert room.asked == (1 if asked else 0)  # NOT_FOUND of the look-up wins: room not asked
    if type(cmd) is not C.Release or cmd.delay:
        assert {j.id: (j.state, j.pri) for j in h.e.iter_jobs()} == states
        assert h.e.next_id == next_id
    assert len(h.records) == records  # nothing to log


@pytest.mark.parametrize("seed", range(4))
def test_room_is_asked_exactly_when_the_command_finds_its_job(seed: int) -> None:
    """Random commands from three connections with clock jumps that land on TTR and delay
    boundaries: room is asked for exactly by the commands that then do not reply NOT_FOUND."""
    rng = random.Random(seed)
    room = CountingRoom(grant=True)
    h = Harness()
    h.e.room = room
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
        before = room.asked
        reply = h.do(cid, cmd)
        writes = type(cmd) in (C.Bury, C.Release, C.KickJob)
        assert room.asked - before == (1 if writes and reply != NF else 0), (cid, cmd, reply)
        checked += 1
    assert checked > 500


def test_on_a_full_wal_not_found_wins_over_out_of_memory(tmp_path: object) -> None:
    """A real WAL whose disk is full: a bury of a job the connection does not hold replies
    NOT_FOUND and changes nothing; one it holds is refused for room (OUT_OF_MEMORY)."""
    import errno

    from stalkd.log.fs import Faults

    fs = Faults()
    fs.fail("allocate", errno.ENOSPC, match="spare")  # no spare segment can be made
    wal = Wal.open(str(tmp_path), durability="never", segment_size=8192, fs=fs)
    e, _ = wal.recover(T0)
    room = Admission(wal, str(tmp_path))
    e.room = room
    e.connect(1, T0)
    e.connect(2, T0)
    while True:  # fill the active segment until a put is refused for room
        out = e.apply(1, C.Put(0, 0, 60, b"y" * 1500), T0)
        room.settle(out.records)
        if out.reply == OOM:
            break
        wal.write(out.records)
    jid = next(iter(e.jobs))
    e.apply(1, C.ReserveJob(jid), T0)
    while wal.admit(64):  # promise away what room is left: the next bury cannot fit
        pass
    seq = e.seq
    assert e.apply(2, C.Bury(jid, 1), T0).reply == NF
    assert e.apply(1, C.Bury(10**6, 1), T0).reply == NF
    assert e.seq == seq
    assert e.apply(1, C.Bury(jid, 1), T0).reply == OOM
    assert e.seq == seq
    wal.close()


def test_a_room_is_one_engines_own_and_clear_keeps_it() -> None:
    """The guarded handlers read the room from the engine they run in: an engine without a
    room beside one whose room is full still takes puts, and ``clear`` keeps each as it was."""
    from stalkd.engine import Engine

    full, free = Engine(), Engine()
    full.room = CountingRoom(grant=False)
    for e in (full, free):
        e.connect(1, T0)
    put = C.Put(0, 0, 60, b"x")
    assert full.apply(1, put, T0).reply == OOM
    assert free.apply(1, put, T0).reply == C.Reply("INSERTED", (1,))
    full.clear()
    free.clear()
    assert isinstance(full.room, CountingRoom) and free.room is None
    for e in (full, free):
        e.connect(1, T0)
    assert full.apply(1, put, T0).reply == OOM and len(full.jobs) == 0
    assert free.apply(1, put, T0).reply == C.Reply("INSERTED", (1,))
    full.room = None  # taken away: puts go through again
    assert full.apply(1, put, T0).reply == C.Reply("INSERTED", (1,))
