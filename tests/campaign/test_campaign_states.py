"""What a failover that times out says of each node (``Cluster.states``): whether its process
runs or how it exited, its last log line, and for a running one where it is stuck (its stack,
dumped beside its log), so that a stall is diagnosed from the run directory alone."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the campaign package; after the rest

from campaign.cluster import Cluster  # noqa: E402


def test_states_names_each_process_its_last_line_and_a_running_ones_stack(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, "standby")
    try:
        cluster.start()
        p, s = cluster.nodes["p"], cluster.nodes["s"]
        s.signal(signal.SIGSTOP)  # stuck, as the stalled rejoin was
        p.kill9()
        said = cluster.states()
        assert "p: exited with -9" in said and "p: exited with -9, stack" not in said
        stack = tmp_path / "s" / "s.stack.txt"
        assert f"s: running, stack in {stack}, last said: " in said
        assert s.proc is not None
        assert stack.read_text().startswith(f"pid {s.proc.pid}\n")
        assert s.log_text().rstrip().splitlines()[-1] in said
    finally:
        cluster.nodes["s"].signal(signal.SIGCONT)
        cluster.close()
