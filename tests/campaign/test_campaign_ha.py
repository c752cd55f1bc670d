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

from campaign.checker import Anomaly  # noqa: E402
from campaign.history import WATCH, Op, pair, read_events  # noqa: E402
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
    if result.anomalies and _only_known_bugs(ops, result.anomalies):
        pytest.xfail(f"{KNOWN_BUGS}:\n{found}")
    assert result.anomalies == [], found


# Two open bugs this campaign found (tests/ha/test_ha_held_reply.py reproduces each; the
# hand-over note /work/notes/ha29.md has the details):
# 1. a primary whose lease runs out answers a reply it was holding with NOT_PRIMARY though the
#    write is in its log and on its sync standby, which is promoted with it; the client, told
#    NOT_PRIMARY means "nothing applied", resends it: a delete then meets its own effect
#    (NOT_FOUND, recorded as a refusal, so its job counts as lost), a put is applied twice;
# 2. a primary resumed after a pause past its lease answers a reserve with a job before it
#    notices it was deposed (fenced-ack of a reserve).
KNOWN_BUGS = ("open bugs: a write applied by a primary whose lease ran out is answered NOT_PRIMARY "
              "and resent by the client; a deposed primary hands out a job after a pause")


def _only_known_bugs(ops: list[Op], anomalies: list[Anomaly]) -> bool:
    """Every anomaly is one of those bugs' signatures: a lost job whose delete was answered
    NOT_FOUND, a duplicated body, a reserve acknowledged by a deposed primary."""
    refused = {op.value.get("id") for op in ops if op.f == "delete" and op.type == "fail"
               and op.value.get("error") == "NotFound"}
    return all(a.kind == "duplicated" or (a.kind == "lost" and a.job in refused)
               or (a.kind == "fenced-ack" and a.detail.startswith("reserve ")) for a in anomalies)
