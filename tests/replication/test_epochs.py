"""Epochs and fencing as pure rules, and the state file (real files in a temporary directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.engine import Engine
from stalkd.engine.handover import epoch_record
from stalkd.persist.wal import Wal
from stalkd.replication import epochs
from stalkd.replication.epochs import EpochState, diverged_at, saw_epoch
from stalkd.replication.gate import SyncGate
from stalkd.replication.role import Role


def test_promotions_chain_and_cut_where_a_lineage_left() -> None:
    e = Engine()
    r = Role(None)
    r.attach(e)
    epoch_record(e, r.next_epoch(), 100, 0.0)  # epoch 1 from offset 100
    epoch_record(e, r.next_epoch(), 250, 0.0)  # epoch 2 from 250
    b = r.state
    assert (b.epoch, b.history) == (2, ((1, 100), (2, 250)))
    # A standby of epoch 0 (the first primary) holding 180 records: 100..179 were never ours.
    assert diverged_at(b, 300, 0, 180) == 100
    assert diverged_at(b, 300, 0, 100) is None  # a prefix
    assert diverged_at(b, 300, 1, 260) == 250
    assert diverged_at(b, 300, 2, 300) is None


def test_a_newer_epoch_fences_until_the_log_reaches_it(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path, durability="never")
    e, _ = wal.recover(0.0)
    r = Role(str(tmp_path))
    r.attach(e)
    assert not r.refuses()
    r.saw(0)
    assert not r.refuses()  # not newer
    r.saw(2)
    assert r.refuses()
    again = Role(str(tmp_path))
    again.attach(e)
    assert again.refuses(), "fencing survives a restart"
    # Following the newer lineage, its EPOCH records reach this log: no longer fenced.
    wal.write([epoch_record(e, 1, 5, 0.0), epoch_record(e, 2, 9, 0.0)])
    assert not r.refuses() and r.next_epoch() == 3
    wal.write([epoch_record(e, r.next_epoch(), 20, 0.0)])
    wal.sync()
    wal.close()
    assert epochs.scan(str(tmp_path)) == ((1, 5), (2, 9), (3, 20)), "the history is the log's"
    with Wal.open(tmp_path, durability="never") as w2:
        e2, _ = w2.recover(0.0)
        assert e2.epochs == ((1, 5), (2, 9), (3, 20))


def test_a_state_file_of_an_earlier_build_gives_only_its_fencing(tmp_path: Path) -> None:
    (tmp_path / epochs.STATE_FILE).write_text('{"epoch": 4, "history": [[4, 10]], "fenced": 6}')
    r = Role(str(tmp_path))
    assert (r.state.epoch, r.state.fenced, r.refuses()) == (0, 6, True)


def test_saw_an_older_epoch_changes_nothing() -> None:
    s = EpochState(3, ((3, 7),))
    assert saw_epoch(s, 2) is s and saw_epoch(s, 3) is s


def test_a_damaged_state_file_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / epochs.STATE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=epochs.STATE_FILE):
        epochs.load_state(str(tmp_path))


def test_gate_needs_n_standbys_and_forgets_those_that_leave() -> None:
    g = SyncGate(2)
    g.note(1, 10)
    g.ack("a", 50)
    assert g.replicated == 0  # one of two
    g.ack("b", 10)
    assert g.replicated == 1
    g.note(2, 20)
    g.drop("b")
    g.ack("c", 30)
    assert g.replicated == 2
    g.ack("a", 40)  # lower than before: ignored
    assert g.quorum() == 30


def test_a_claim_of_a_newer_epoch_fences_only_when_its_history_continues_ours() -> None:
    mine = EpochState(1, ((1, 100),))
    ok = ((1, 100), (2, 250))
    assert epochs.verify_claim(mine, 300, 2, ok) is None
    assert epochs.verify_claim(mine, 300, 2, ()) is not None  # a bare number
    assert epochs.verify_claim(mine, 300, 2, ((1, 90), (2, 250))) is not None  # not our epoch 1
    # forked past our end: our standby held records we lost in a power cut, and was promoted
    assert epochs.verify_claim(mine, 240, 2, ok) is None
    assert epochs.verify_claim(mine, 300, 2, ((1, 100), (2, 50))) is not None  # out of order
    assert epochs.verify_claim(mine, 300, 1, ((1, 100),)) is not None  # not newer
    r = Role(None)
    r.attach(Engine())
    assert r.claim(7, (), 0) is not None and not r.refuses() and r.name == "primary"
