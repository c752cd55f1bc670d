"""A power cut of a primary and its sync standby at the same moment (``campaign.pairloss``),
short: under ``always`` with ``--sync-standbys 1`` nothing acknowledged is lost, nothing deleted
comes back, nothing is invented, and both servers restart by themselves; with the WAL's fsyncs
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
    if "already exists" in r.unrecoverable:
        # An open bug, found by this campaign (about 1 cut in 120): the standby had fsynced
        # records its primary lost in the cut, the primary wrote others at the same offsets,
        # and the standby's two histories stop its restart. Nothing acknowledged is lost; the
        # stream request needs the standby's last frame checked against the primary's.
        pytest.xfail(f"known: a standby holding records its primary lost in the cut ({r.unrecoverable[-200:]})")
    assert _cuts(r.ops) == 3
    assert r.row["acknowledged"] > 0
    assert r.restart_failures == 0
    assert r.anomalies == [], [a.detail for a in r.anomalies][:20]


def test_with_the_wal_fsyncs_dropped_on_both_machines_acknowledged_puts_are_lost(tmp_path: Path) -> None:
    r = pair_power_run(tmp_path / "run", cycles=2, seed=22, ignore_fsync="seg-")
    assert count(r.anomalies)["lost"] > 0, (count(r.anomalies), r.restart_failures)
