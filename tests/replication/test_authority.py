"""The one decision "may this primary acknowledge now" as a pure state machine: what it
installs in the barriers and what it reports, for a restart check, a fence and a sync gate."""

from __future__ import annotations

from stalkd.replication.authority import Authority, Gate
from stalkd.replication.gate import SyncGate

REFUSAL = b"NOT_PRIMARY\r\n"


class Barriers:
    """The barriers as the authority sees them (``authority.Withholding``): what it was told."""

    def __init__(self, durable: int) -> None:
        self.durable = durable
        self.gate: Gate | None = None
        self.released = 0
        self.abandoned: tuple[bytes, ...] | None | str = "never"

    def replicated(self) -> None:
        self.released += 1

    def abandon(self, parts: tuple[bytes, ...] | None) -> None:
        self.abandoned = parts


def test_a_restart_check_holds_acknowledgements_until_allowed() -> None:
    b = Barriers(durable=3)
    a = Authority(b, None, REFUSAL)
    assert b.gate is None and a.may_acknowledge()  # no gate: the barriers' fast path
    a.withhold("checking")
    assert b.gate is not None and b.gate.replicated == 3 and not a.may_acknowledge()
    b.durable = 9  # written and synced meanwhile: still not acknowledged
    assert b.gate.replicated == 3
    assert a.problems() == ["not acknowledging writes: checking"]
    a.allow("a standby streams")
    assert b.gate is None and b.released == 1 and a.may_acknowledge() and a.problems() == []


def test_a_promotion_waiting_for_its_term_is_not_released_by_a_streaming_standby() -> None:
    # A promoted node acknowledges nothing until etcd records its epoch ("term"); a standby of
    # its streaming only answers a restart's check, so it does not lift that wait
    b = Barriers(durable=4)
    a = Authority(b, None, REFUSAL)
    a.withhold("epoch 2 is not recorded in etcd yet", cause="term")
    a.allow("a standby follows epoch 2, no newer than ours")
    assert not a.may_acknowledge() and b.released == 0
    a.allow("epoch 2 is recorded in etcd", cause="term")
    assert a.may_acknowledge() and b.released == 1 and b.gate is None


def test_a_restart_check_and_a_term_record_are_both_waited_for() -> None:
    # A restarted primary whose directory had standbys and that leads a new epoch at start waits
    # for both: a streaming standby lifts the check, not the record, and the other way round
    for first, second in (("restart", "term"), ("term", "restart")):
        b = Barriers(durable=2)
        a = Authority(b, None, REFUSAL)
        a.withhold("checking for a newer epoch", cause="restart")
        a.withhold("epoch 3 is not recorded in etcd yet", cause="term")
        assert a.problems() == ["not acknowledging writes: checking for a newer epoch; "
                                "epoch 3 is not recorded in etcd yet"]
        a.allow(f"{first} done", cause=first)
        assert not a.may_acknowledge() and b.released == 0 and b.gate is not None
        a.allow(f"{first} done again", cause=first)  # said twice: still one cause left
        assert not a.may_acknowledge()
        a.allow(f"{second} done", cause=second)
        assert a.may_acknowledge() and b.released == 1 and b.gate is None and a.problems() == []


def test_a_fence_abandons_what_is_held_for_good() -> None:
    b = Barriers(durable=5)
    a = Authority(b, None, REFUSAL)
    a.withhold("checking")
    a.fence("epoch 2 began elsewhere")
    assert b.abandoned == (REFUSAL,) and b.gate is not None and b.gate.replicated == 5
    a.allow("too late")  # nothing brings a fenced primary back
    assert not a.may_acknowledge() and b.released == 0
    assert a.problems() == ["fenced: epoch 2 began elsewhere"]


def test_a_fence_while_leading_cuts_what_is_held_instead_of_refusing_it() -> None:
    """Held while leading, a write may be on the standby promoted in our place: NOT_PRIMARY
    ("nothing applied, send it again") would make a client apply it twice."""
    b = Barriers(durable=5)
    a = Authority(b, SyncGate(1), REFUSAL)
    a.fence("the lease ran out")
    assert b.abandoned is None and not a.may_acknowledge()


def test_with_a_sync_gate_the_gate_decides_while_leading() -> None:
    b = Barriers(durable=0)
    sync = SyncGate(1)
    a = Authority(b, sync, REFUSAL)
    assert b.gate is not None
    b.gate.note(1, 10)
    assert b.gate.replicated == 0
    sync.ack("s1", 10)
    assert b.gate.replicated == 1
    a.withhold("lease lapsed")
    sync.note(2, 20)
    sync.ack("s1", 20)
    assert sync.replicated == 2 and b.gate.replicated == 0  # frozen where withholding began
