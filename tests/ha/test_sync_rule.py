"""``decide.next_sync_set``: the primary's sync set rule, without etcd or a server. Every case
checks the two promises: a member holds every acknowledged change (it counts before etcd names
it, and etcd stops naming it before it stops counting), and the set never shrinks to the leader
alone while some member could still take over."""

from __future__ import annotations

from stalkd.ha.decide import next_sync_set

F = frozenset


def test_a_new_term_writes_nothing_until_a_standby_caught_up() -> None:
    assert next_sync_set(F(), {}, 100, 1, None).write is None
    assert next_sync_set(F(), {"b": 99}, 100, 1, None).write is None  # one record short
    step = next_sync_set(F(), {"b": 100, "c": 100}, 100, 1, None)
    assert step.write == F({"b"}) and step.count == F({"b"})  # the first by name, exactly one


def test_two_needed_one_ready_is_named_and_counted_but_nothing_is_acknowledged_yet() -> None:
    step = next_sync_set(F(), {"b": 100, "c": 50}, 100, 2, None)
    assert step.count == F({"b"}) and step.write == F({"b"})
    step = next_sync_set(F({"b"}), {"b": 120, "c": 120}, 120, 2, F({"b"}))
    assert step.count == F({"b", "c"}) and step.write == F({"b", "c"})


def test_a_member_that_went_away_stays_until_a_replacement_caught_up() -> None:
    assert next_sync_set(F({"b"}), {}, 100, 1, F({"b"})) == next_sync_set(F({"b"}), {"c": 90}, 100, 1, F({"b"}))
    step = next_sync_set(F({"b"}), {"c": 90}, 100, 1, F({"b"}))
    assert step.write is None and step.count == F({"b"})
    step = next_sync_set(F({"b"}), {"c": 100}, 100, 1, F({"b"}))
    assert step.count == F({"b", "c"})  # c counts before etcd names it ...
    assert step.write == F({"c"})  # ... and b leaves etcd's set in the same write


def test_a_member_that_came_back_is_counted_again_without_a_write() -> None:
    step = next_sync_set(F({"b"}), {"b": 10}, 100, 1, F({"b"}))
    assert step.write is None and step.count == F({"b"})


def test_after_a_failed_write_the_extra_member_is_taken_out_once_enough_are_left() -> None:
    # the write of {c} failed after c was counted: the gate counts {b, c}, etcd still says {b}
    step = next_sync_set(F({"b", "c"}), {"c": 100}, 100, 1, F({"b"}))
    assert step.write == F({"c"}) and step.count == F({"b", "c"})  # b still counts until written


def test_nothing_is_ever_written_as_the_leader_alone() -> None:
    cases = [(F(m), {k: v for k, v in a.items()}, need, w)
             for m in ((), ("b",), ("b", "c"))
             for a in ({}, {"b": 1}, {"c": 9}, {"b": 9, "c": 9})
             for need in (1, 2)
             for w in (None, F({"b"}), F({"b", "c"}))]
    for members, acked, need, written in cases:
        step = next_sync_set(members, acked, 9, need, written)
        assert step.write is None or step.write, (members, acked, need, written)
        assert members <= step.count  # nobody stops counting before etcd's set is written
