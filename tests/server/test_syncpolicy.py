"""SyncPolicy: the choice between the sync thread and an inline fsync, from measured times."""

from __future__ import annotations

import pytest

from stalkd.server.syncpolicy import SyncPolicy


def test_nothing_runs_inline_before_a_handoff_was_measured() -> None:
    p = SyncPolicy()
    assert not p.inline()
    p.inline_done(0.0001)  # an fsync time alone says nothing about the thread
    assert not p.inline()


def test_inline_while_the_fsync_is_cheaper_than_the_handoff() -> None:
    p = SyncPolicy(max_inline=0.001)
    p.thread_done(handoff=0.0003, fsync=0.0002)
    assert p.inline()
    # When the disk slows down past the hand-off, the thread again
    for _ in range(20):
        p.inline_done(0.0009)
    assert p.fsync is not None and p.fsync > 0.0003
    assert not p.inline()


def test_never_inline_when_the_fsync_exceeds_the_bound_however_dear_the_handoff() -> None:
    p = SyncPolicy(max_inline=0.001)
    p.thread_done(handoff=0.5, fsync=0.002)  # a slow disk on a very busy machine
    assert not p.inline()
    for _ in range(30):
        p.thread_done(handoff=0.5, fsync=0.0005)  # the disk recovers
    assert p.inline()


def test_a_thread_probe_after_every_probe_every_inline_syncs() -> None:
    p = SyncPolicy(probe_every=3)
    p.thread_done(handoff=0.01, fsync=0.0001)
    choices = []
    for _ in range(12):
        if p.inline():
            choices.append("i")
            p.inline_done(0.0001)
        else:
            choices.append("t")
            p.thread_done(handoff=0.01, fsync=0.0001)
    assert "".join(choices) == "iiitiiitiiit"


def test_averages_follow_the_measurements() -> None:
    p = SyncPolicy(alpha=0.5)
    p.thread_done(handoff=0.004, fsync=0.002)
    assert (p.handoff, p.fsync) == (0.004, 0.002)  # the first measurement is the average
    p.thread_done(handoff=0.002, fsync=0.004)
    assert (p.handoff, p.fsync) == pytest.approx((0.003, 0.003))
    with pytest.raises(ValueError, match="alpha"):
        SyncPolicy(alpha=0.0)
