"""A short run of the campaign's ``ha`` topology: three ``--ha`` nodes on a real etcd, faults
against the current primary (kill -9 and restart, its way to etcd cut and healed, a pause past
its lease), the campaign's workload following the primary through every failover: each fault
makes another node primary, the clients' acknowledgements come from more than one node, and the
checker finds nothing. ``make campaign`` runs the long version with every nemesis."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support import require_binary

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the campaign package; after the rest

from campaign.history import WATCH, pair, read_events  # noqa: E402
from campaign.run import RunSpec, run  # noqa: E402

# faults outlast the nodes' 2 s lease: every one ends in a failover
SHORT = {"cycles": 2, "fault": 3.0, "quiet": 1.5}


@pytest.mark.slow
@pytest.mark.parametrize("nemesis", ["kill9", "etcd-cut", "pause"])
def test_a_short_ha_run_fails_over_at_each_fault_and_finds_nothing(tmp_path: Path, nemesis: str) -> None:
    require_binary("etcd")
    spec = RunSpec(nemesis, "ha", seed=5, **SHORT)  # type: ignore[arg-type]
    result = run(spec, tmp_path / spec.label)
    ops = pair(read_events(result.directory / "history.jsonl"))
    hits = [op.value["node"] for op in ops if op.process == "nemesis" and op.f == "start"]
    promotions = [(op.value["old"], op.value["new"]) for op in ops if op.process == WATCH and op.f == "promote"]
    # each fault hit the primary of its moment, and another node took over from it
    assert [old for old, _ in promotions] == hits, (hits, promotions)
    acked_by = {op.node for op in ops if op.f == "put" and op.ok}
    assert len(acked_by) >= 2, acked_by  # the clients followed the primary
    assert result.row["acknowledged"] > 0, result.row
    found = "\n".join(f"{a.kind} {a.job}: {a.detail}" for a in result.anomalies)
    assert result.anomalies == [], found
