"""A standby holding records its primary lost does not append the primary's new ones after them.

Both machines lose power: the primary had streamed records it had not fsynced yet, so its
standby holds them and the primary does not. The primary comes back first and writes new
records at those offsets, in the same epoch (nothing was promoted: ``DIVERGED`` cannot see
it). The fault campaign's pair power cut found a standby that then asked from its longer end
and appended the new records after its own: two histories in one log, which it refused to
start from (campaign/pairloss.py, once in 122 cuts).

Here the loss is made exactly, with no power cut: the primary's directory is copied while it
is stopped, the primary deletes five jobs (which the standby follows, and the standby is then
killed), and the copy is put back, as a power cut that lost those five records would leave it.
The primary then puts ten jobs with the standby away; the standby's end is five records into
them. A standby that appended from its own end would have the five deletes and miss five puts;
it must instead see that the primary's record at its last offset is not its own, and copy the
primary's state."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import stalkd
from server.proc import StalkdProcess

from .cluster import Relay, caught_up, primary, promote_by_signal, snapshot, standby, stats, until

FIRST, DELETED, LATER = 20, 5, 10


def _lose_deletes(d: Path, p: StalkdProcess, follower: StalkdProcess, relay: Relay) -> StalkdProcess:
    """The primary ``p`` (data directory ``d``, which ``relay`` leads ``follower`` to) deletes
    jobs 1 to DELETED, which ``follower`` holds too, and then loses them as a power cut would:
    its directory as it was before them is put back (copied while it was stopped), and the
    relay is cut. Returns the primary's process, killed."""
    p.stop()
    before = d.with_name(d.name + "-before")
    shutil.copytree(d, before)
    p = primary(d)
    relay.target = (p.host, p.port)
    with stalkd.Client(p.address) as c:
        for jid in range(1, DELETED + 1):
            c.delete(jid)
    until(lambda: caught_up(p, follower), "the standby to follow the deletes", logs=(p, follower))
    relay.cut()
    p.kill9()
    shutil.rmtree(d)
    before.rename(d)
    return p


@pytest.mark.parametrize("standby_restarts", [True, False], ids=["at-start", "while-running"])
@pytest.mark.parametrize("later_puts", [LATER, DELETED], ids=["primary-ahead", "same-end"])
def test_a_standby_holding_records_the_primary_lost_resyncs_instead_of_appending(
        tmp_path: Path, standby_restarts: bool, later_puts: int) -> None:
    """``at-start``: the standby was killed too and meets the primary in its start-up catch-up;
    ``while-running``: it kept running, cut off, and meets it when its stream reconnects.
    ``same-end``: the primary's new records end where the standby's log does, so there is no
    record to copy (the start-up catch-up said "0 records copied" and served the old copy until
    its stream found the difference and resynced while running: the pair power cut's trace)."""
    p = primary(tmp_path / "p")
    relay = Relay(p)
    s = standby(tmp_path / "s", p, via=relay.address)
    try:
        with stalkd.Client(p.address) as c:
            for i in range(FIRST):
                c.put(b"first-%d" % i)
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        p = _lose_deletes(tmp_path / "p", p, s, relay)
        if standby_restarts:
            s.kill9()

        p = primary(tmp_path / "p")
        relay.target = (p.host, p.port)
        with stalkd.Client(p.address) as c:
            later = [c.put(b"later-%d" % i) for i in range(later_puts)]
        relay.heal()
        if standby_restarts:
            s = standby(tmp_path / "s", p, via=relay.address)
        until(lambda: caught_up(p, s), "the standby to follow the primary that lost records", logs=(p, s))

        ids = range(1, max(later) + 1)
        mine = snapshot(s, ids)
        theirs = snapshot(p, ids)
        assert len(theirs) == FIRST + later_puts  # the deletes were lost with the primary's tail
        assert mine == theirs, s.log_text()
        assert stats(s)["role"] == "standby"
        assert "is not ours" in s.log_text()
        if standby_restarts:  # found before it served, not by the stream afterwards
            assert "without a restart" not in s.log_text(), s.log_text()
    finally:
        relay.close()
        s.stop()
        p.stop()


def test_a_promoted_primary_that_lost_records_its_standby_holds_accepts_the_standby_s_newer_epoch(
        tmp_path: Path) -> None:
    """``b``, primary of epoch 1 (a promoted standby), loses five records its standby ``a``
    holds; ``a`` is promoted (epoch 2, from its longer end) and ``b`` comes back: its directory
    was promoted, so it starts as a primary, and ``a`` tells it of epoch 2. That claim forks
    past the end of ``b``'s log; refused, ``b`` stayed a primary beside ``a`` for good (found by
    the pair power cut with promotions, campaign/pairloss.py --promote). ``b`` must step down
    and follow ``a``."""
    a = primary(tmp_path / "a")
    relay = Relay(a)  # a's way to b: b's port changes with each start
    b = standby(tmp_path / "b", a)
    try:
        with stalkd.Client(a.address) as c:
            for i in range(FIRST):
                c.put(b"first-%d" % i)
        until(lambda: caught_up(a, b), "b to follow a", logs=(a, b))
        a.stop()
        promote_by_signal(b)  # b: primary of epoch 1
        relay.target = (b.host, b.port)
        a = standby(tmp_path / "a", b, via=relay.address)
        until(lambda: caught_up(b, a), "a to follow b", logs=(a, b))
        b = _lose_deletes(tmp_path / "b", b, a, relay)

        promote_by_signal(a)  # a: primary of epoch 2, from its end, past b's
        assert stats(a)["epoch"] == 2
        b = standby(tmp_path / "b", a)  # promoted before: it starts as a primary, then is told
        relay.target = (b.host, b.port)  # a's way to its former primary, to tell it
        relay.heal()
        until(lambda: stats(b)["role"] == "standby" and caught_up(a, b), "b to step down and follow a",
              timeout=60, logs=(a, b))  # fmt: skip
        ids = range(1, FIRST + 1)
        assert snapshot(b, ids) == snapshot(a, ids)
        assert len(snapshot(a, ids)) == FIRST - DELETED
    finally:
        relay.close()
        a.stop()
        b.stop()
