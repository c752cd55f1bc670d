"""Epochs and fencing as pure rules, and the state file (real files in a temporary directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalkd.replication import epochs
from stalkd.replication.epochs import EpochState, diverged_at, promoted, saw_epoch
from stalkd.replication.gate import SyncGate
from stalkd.replication.role import Role


def test_promotions_chain_and_cut_where_a_lineage_left() -> None:
    a = promoted(EpochState(), 100)  # epoch 1 from offset 100
    b = promoted(a, 250)  # epoch 2 from 250
    assert b.history == ((1, 100), (2, 250))
    # A standby of epoch 0 (the first primary) holding 180 records: 100..179 were never ours.
    assert diverged_at(b, 300, 0, 180) == 100
    assert diverged_at(b, 300, 0, 100) is None  # a prefix
    assert diverged_at(b, 300, 1, 260) == 250
    assert diverged_at(b, 300, 2, 300) is None


def test_a_newer_epoch_fences_until_following_it(tmp_path: Path) -> None:
    r = Role(str(tmp_path))
    assert not r.refuses()
    r.saw(0)
    assert not r.refuses()  # not newer
    r.saw(2)
    assert r.refuses()
    assert Role(str(tmp_path)).refuses(), "fencing survives a restart"
    r.standby = True
    r.follow(2, ((1, 5), (2, 9)))
    r.promote(20)
    assert not r.refuses() and r.state.epoch == 3 and r.state.history[-1] == (3, 20)
    assert epochs.load(str(tmp_path)) == r.state


def test_saw_an_older_epoch_changes_nothing() -> None:
    s = EpochState(3, ((3, 7),))
    assert saw_epoch(s, 2) is s and saw_epoch(s, 3) is s


def test_a_damaged_state_file_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / epochs.STATE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=epochs.STATE_FILE):
        epochs.load(str(tmp_path))


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
