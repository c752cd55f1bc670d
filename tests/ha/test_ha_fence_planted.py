"""A fence ignored under ``--ha``, planted and caught (``campaign.hafence``): the primary of a
three-node cluster loses its way to etcd while loaded, another node is promoted, and a client
that still has the old primary's address puts a few jobs. Unpatched, the old primary
acknowledges nothing from the moment its lease ran out; run from a copy of the source tree
whose lease check and fencing are patched out, it acknowledges the stale client's puts, and the
campaign's checker reports them (``fenced-ack``, and ``lost``: the new primary never had them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from etcdserver import EtcdProcess, UnixProxy

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the campaign package; after the rest

from campaign.checker import Anomaly, count  # noqa: E402
from campaign.hafence import NAMES, STALE_PUTS, ha_fence_run  # noqa: E402
from campaign.history import Op  # noqa: E402

pytestmark = pytest.mark.slow


def _run(etcd: EtcdProcess, tmp_path: Path, plant: bool) -> tuple[list[Op], list[Anomaly]]:
    proxies = {n: UnixProxy(tmp_path / f"{n}-etcd", etcd.socket) for n in NAMES}
    try:
        return ha_fence_run(tmp_path / "run", plant, {n: p.address() for n, p in proxies.items()},
                            lambda n: proxies[n].cut(), lambda n: proxies[n].heal())
    finally:
        for p in proxies.values():
            p.cut()


def test_an_old_primary_whose_lease_ran_out_acknowledges_nothing(etcd: EtcdProcess, tmp_path: Path) -> None:
    ops, anomalies = _run(etcd, tmp_path, plant=False)
    stale = [(op.type, op.value.get("error")) for op in ops if op.process == "stale-client" and op.f == "put"]
    assert stale and not any(t == "ok" for t, _ in stale), stale
    found = count(anomalies)
    assert found["fenced-ack"] == 0, [a.detail for a in anomalies][:20]
    # The cluster runs --sync-standbys 0: a put the old primary acknowledged while it still held
    # the lease, before its standbys had it, may be lost at the failover (async replication's
    # window), and a put whose reply the failover cut may be sent again by its client, as two
    # jobs (both seen on a loaded CI machine); nothing else may be found.
    assert {k for k, n in found.items() if n} <= {"lost", "duplicated"}, [a.detail for a in anomalies][:20]


def test_with_its_lease_and_fence_ignored_the_checker_reports_its_acknowledgements(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    ops, anomalies = _run(etcd, tmp_path, plant=True)
    stale = [op.type for op in ops if op.process == "stale-client" and op.f == "put"]
    assert stale == ["ok"] * STALE_PUTS, stale
    found = count(anomalies)
    # lost: those the new primary never had (a worker of the load still on the old primary may
    # have deleted some there)
    assert found["fenced-ack"] >= STALE_PUTS and found["lost"] > 0, found
