"""A standby stopped while its primary compacts past its position copies a snapshot on its
next start, then streams the rest and holds the same jobs; a running standby cut off from its
primary meanwhile does the same without a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import stalkd
from server.proc import StalkdProcess
from stalkd.client._address import parse_address
from stalkd.replication.catchup import CatchUpError, catch_up
from stalkd.secretfile import read_secret

from .cluster import (
    WAL_SIZE,
    Relay,
    caught_up,
    primary,
    secret_file,
    snapshot,
    standby,
    stats,
    until,
)


def _churn(address: str, rounds: int, keep_every: int) -> None:
    """Put and delete many jobs (dead WAL for compaction), keeping one in ``keep_every``."""
    with stalkd.Client(address) as c:
        for i in range(rounds):
            jid = c.put(b"x" * 200 + str(i).encode())
            if i % keep_every:
                c.delete(jid)


def _compact_past(p: StalkdProcess, offset: int) -> None:
    """Churn until the primary keeps no segment before ``offset``: it compacted past it."""
    for _ in range(50):
        _churn(p.address, 400, 10)
        if int(stats(p)["binlog-oldest-index"]) > offset:
            return
    raise AssertionError(f"the primary never compacted past offset {offset}:\n{p.log_text()}")


@pytest.mark.slow
def test_standby_behind_compaction_copies_a_snapshot_then_streams(tmp_path: Path) -> None:
    p = primary(tmp_path / "p")
    s = standby(tmp_path / "s", p)
    try:
        _churn(p.address, 50, 5)
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        s.stop()
        start_oldest = int(stats(p)["binlog-oldest-index"])
        # Enough churn that compaction drops the segments the stopped standby still needs.
        _compact_past(p, start_oldest + 100)
        s = standby(tmp_path / "s", p)
        _churn(p.address, 30, 3)  # and records after the snapshot, streamed live
        until(lambda: caught_up(p, s), "the restarted standby to catch up", logs=(p, s))
        assert "copied the primary's snapshot" in s.log_text()
        assert list((tmp_path / "s" / "quarantine").iterdir()), "the stale copy was kept, not deleted"
        top = int(stats(p)["total-jobs"])
        want = snapshot(p, top)
        assert len(want) > 40
        assert snapshot(s, top) == want
    finally:
        s.stop()
        p.stop()


@pytest.mark.slow
def test_a_new_standby_of_a_compacted_primary_starts_from_its_snapshot(tmp_path: Path) -> None:
    p = primary(tmp_path / "p")
    s = None
    try:
        _compact_past(p, 0)
        s = standby(tmp_path / "s", p)
        until(lambda: caught_up(p, s), "the new standby to catch up", logs=(p, s))
        assert "copied the primary's snapshot" in s.log_text()
        assert not (tmp_path / "s" / "quarantine").exists(), "an empty directory has nothing to keep"
        top = int(stats(p)["total-jobs"])
        assert snapshot(s, top) == snapshot(p, top)
    finally:
        if s is not None:
            s.stop()
        p.stop()


@pytest.mark.slow
def test_a_running_standby_cut_off_while_the_primary_compacts_resyncs_without_a_restart(tmp_path: Path) -> None:
    p = primary(tmp_path / "p")
    relay = Relay(p)
    s = standby(tmp_path / "s", p, via=relay.address)
    reader = None
    try:
        _churn(p.address, 50, 5)
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        reader = stalkd.Client(s.address, reconnect=False)  # a client of the standby throughout
        reader.use("kept")
        reader.watch("kept")
        relay.cut()
        until(lambda: stats(p).get("standbys", 0) == 0, "the primary to see the standby go", logs=(p, s))
        end_at_cut = int(stats(p)["binlog-records-written"])  # a fresh log: its end offset
        _compact_past(p, end_at_cut)  # the primary keeps nothing the standby would ask for
        relay.heal()
        _churn(p.address, 30, 3)
        until(lambda: caught_up(p, s), "the standby to resync on its own", timeout=120, logs=(p, s))
        assert s.proc.poll() is None and "resynced with" in s.log_text()
        assert list((tmp_path / "s" / "quarantine").iterdir()), "the stale copy was kept, not deleted"
        top = int(stats(p)["total-jobs"])
        want = snapshot(p, top)
        assert len(want) > 40
        assert snapshot(s, top) == want
        # the standby's own client kept its connection and its tubes
        assert (reader.list_tube_used(), reader.list_tubes_watched()) == ("kept", ["default", "kept"])
    finally:
        if reader is not None:
            reader.close()
        relay.close()
        s.stop()
        p.stop()


@pytest.mark.slow
def test_a_copy_reports_the_primary_end_as_it_learns_it(tmp_path: Path) -> None:
    """A resyncing standby's ``primary-lag`` comes from this: without it the standby would go on
    reporting the lag it had when cut off (0 if it was current then) through a whole copy."""
    p = primary(tmp_path / "p")
    try:
        _compact_past(p, 0)
        end = int(stats(p)["binlog-records-written"])  # a fresh log: its end offset
        seen: list[int] = []
        catch_up(parse_address(p.address), str(tmp_path / "copy"), segment_size=int(WAL_SIZE),
                 secret=read_secret(secret_file(tmp_path / "p")), on_end=seen.append)  # fmt: skip
        # first the snapshot's start (the copy is that far behind at least), then the true end
        assert len(seen) == 2 and 0 < seen[0] <= seen[1] == end, (seen, end)
    finally:
        p.stop()


@pytest.mark.slow
def test_a_copy_learns_the_primary_end_before_it_creates_a_file(tmp_path: Path) -> None:
    """A copy that cannot create its log (here ``wal`` is a file; a full disk in production)
    has asked the primary first: the end it reports is the primary's, not the nothing it would
    know had it failed at its first file (a resyncing standby's ``primary-lag`` comes from it)."""
    p = primary(tmp_path / "p")
    try:
        with stalkd.Client(p.address) as c:
            for i in range(20):
                c.put(b"job %d" % i)
        end = int(stats(p)["binlog-records-written"])  # a fresh log: its end offset
        copy = tmp_path / "copy"
        copy.mkdir()
        (copy / "wal").write_bytes(b"")  # no directory can be made here
        seen: list[int] = []
        with pytest.raises(CatchUpError):
            catch_up(parse_address(p.address), str(copy), segment_size=int(WAL_SIZE),
                     secret=read_secret(secret_file(tmp_path / "p")), on_end=seen.append)  # fmt: skip
        assert seen == [end] and end >= 20, (seen, end)
        assert sorted(os.listdir(copy)) == ["wal"]  # and it made nothing else
    finally:
        p.stop()
