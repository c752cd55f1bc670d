"""A short run of every nemesis (two faults each) against a real stalkd, single and with a sync
standby: the checker finds nothing. ``make campaign`` runs the long version."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the campaign package; after the rest

from campaign.cluster import LIBFAKETIME  # noqa: E402
from campaign.history import pair, read_events  # noqa: E402
from campaign.net import make_net  # noqa: E402
from campaign.run import RunSpec, run  # noqa: E402

SHORT = {"cycles": 2, "fault": 3.0, "quiet": 1.5}  # faults outlast the workload's 2 s TTR


def _needs(nemesis: str, net: str) -> None:
    if nemesis in ("full-disk", "partition") and net == "netns" and os.geteuid() != 0:
        pytest.skip(f"{nemesis} needs root (a tmpfs mount, network namespaces)")
    if nemesis == "clock-jump" and not Path(LIBFAKETIME).exists():
        pytest.skip("Debian's faketime is not installed (scripts/system-deps.sh installs it)")
    if nemesis == "partition" and net == "netns":
        probe, why = make_net(["p"], "netns")
        probe.close()
        if why:
            pytest.skip(f"partitions through network namespaces: {why} (the proxy run covers it)")
    if nemesis == "full-disk" and shutil.which("mount") is None:
        pytest.skip("no mount command")


@pytest.mark.slow
@pytest.mark.parametrize(("nemesis", "topology", "net"), [
    ("kill9", "single", "-"), ("pause", "single", "-"), ("partition", "single", "netns"),
    ("partition", "single", "proxy"), ("full-disk", "single", "-"), ("clock-jump", "single", "-"),
    ("kill9", "standby", "-"), ("partition", "standby", "netns"), ("pause", "standby", "-"),
    ("failover", "standby", "-"), ("full-disk", "standby", "-"),
])
def test_a_short_run_of_each_nemesis_finds_nothing(tmp_path: Path, nemesis: str, topology: str, net: str) -> None:
    _needs(nemesis, net)
    spec = RunSpec(nemesis, topology, seed=7, net=net if net != "-" else "netns", **SHORT)  # type: ignore[arg-type]
    result = run(spec, tmp_path / spec.label)
    if nemesis == "partition":
        assert result.net_note.startswith(net), result.net_note  # the network the run says it used
    assert result.row["acknowledged"] > 0, result.row
    delivered = {op.process.split("-")[0] for op in pair(read_events(result.directory / "history.jsonl"))
                 if op.f == "reserve" and op.ok}
    assert delivered == {"worker", "app"}, delivered  # the client's workers and stalkd.worker's
    assert result.anomalies == [], "\n".join(f"{a.kind} {a.job}: {a.detail}" for a in result.anomalies)
