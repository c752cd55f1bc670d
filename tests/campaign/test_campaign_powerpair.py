"""A power cut of a primary and its sync standby at the same moment (``campaign.pairloss``),
short: under ``always`` with ``--sync-standbys 1`` nothing acknowledged is lost, nothing deleted
comes back, nothing is invented, and both servers restart by themselves (also when the standby
is promoted after the cut and the old primary rejoins); with the WAL's fsyncs
dropped by both file systems (the planted bug) the checker reports acknowledged puts lost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the campaign package; after the rest

from campaign.checker import count  # noqa: E402
from campaign.history import Op  # noqa: E402
from campaign.pairloss import NEMESIS, pair_power_run  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fuse")]


def _cuts(ops: list[Op]) -> int:
    return sum(1 for op in ops if op.f == "start" and op.ok and op.value.get("nemesis") == NEMESIS)


def test_a_power_cut_of_the_primary_and_its_sync_standby_together_loses_nothing(tmp_path: Path) -> None:
    r = pair_power_run(tmp_path / "run", cycles=3, seed=21)
    assert _cuts(r.ops) == 3
    assert r.row["acknowledged"] > 0
    assert r.restart_failures == 0
    assert r.anomalies == [], [a.detail for a in r.anomalies][:20]


def test_after_a_power_cut_of_both_the_promoted_standby_has_every_acknowledged_job(tmp_path: Path) -> None:
    """The primary's machine stays down after the cut: its standby comes back alone and is
    promoted, and the old primary rejoins as its standby (twice: the roles alternate)."""
    r = pair_power_run(tmp_path / "run", cycles=2, seed=23, promote=True)
    assert _cuts(r.ops) == 2
    assert sum(1 for op in r.ops if op.process == "nemesis" and op.f == "promote" and op.ok) == 2
    assert r.row["acknowledged"] > 0
    assert r.restart_failures == 0
    assert r.anomalies == [], [a.detail for a in r.anomalies][:20]


def test_with_the_wal_fsyncs_dropped_on_both_machines_acknowledged_puts_are_lost(tmp_path: Path) -> None:
    r = pair_power_run(tmp_path / "run", cycles=2, seed=22, ignore_fsync="seg-")
    assert count(r.anomalies)["lost"] > 0, (count(r.anomalies), r.restart_failures)
