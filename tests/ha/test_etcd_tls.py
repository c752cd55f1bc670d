"""TLS to etcd: a node presents its certificate (``etcds://...?ca=&cert=&key=``), etcd's is
verified, and a refusal is an error that says TLS, not an outage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from etcdserver import EtcdProcess, start_etcd
from server.proc import start_stalkd
from server.tlsutil import Certs, make_certs
from stalkd.ha import Etcd, LeaseKeeper, parse_cluster
from stalkd.ha.cluster import latest_epoch
from stalkd.ha.etcd import EtcdUnavailable
from standby.cluster import stats
from support import wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[EtcdProcess]:
    server = start_etcd(tmp_path_factory.mktemp("etcd-tls"),
                        tls=(certs.ca.cert, certs.server.cert, certs.server.key),
                        probe_cert=(certs.ops.cert, certs.ops.key))
    try:
        yield server
    finally:
        server.stop()


def test_a_node_with_a_certificate_of_the_ca_leads(etcd: EtcdProcess, certs: Certs, tmp_path: Path) -> None:
    cluster = etcd.cluster("tls", cert=certs.producer.cert, key=certs.producer.key)
    addr = parse_cluster(cluster)
    k = LeaseKeeper(Etcd(addr), addr.key("leader"), "a", {}, ttl=2)
    k.step()
    assert k.may_acknowledge()
    k.resign()
    node = start_stalkd("--dir", str(tmp_path / "n"), "--ha", cluster, "--name", "n")
    try:
        assert stats(node)["role"] == "primary"
        # and its other etcd clients (the epoch it publishes, the sync set, the switchover
        # key) present the same certificate: the epoch it leads is recorded in etcd
        epoch = int(stats(node)["cluster-epoch"])
        wait_until(lambda: latest_epoch(Etcd(addr), addr) == epoch, f"epoch {epoch} recorded in etcd")
    finally:
        node.stop()


@pytest.mark.parametrize("who", ["none", "stranger"])
def test_without_a_certificate_etcd_trusts_nothing_is_read(etcd: EtcdProcess, certs: Certs, who: str) -> None:
    cert = {"none": (None, None), "stranger": (certs.stranger.cert, certs.stranger.key)}[who]
    client = Etcd(parse_cluster(etcd.cluster("tls", cert=cert[0], key=cert[1])), timeout=2)
    with pytest.raises(EtcdUnavailable, match="TLS|certificate|reset|closed|EOF"):
        client.get("/stalkd/tls/leader")


def test_a_missing_certificate_file_is_named_before_any_connection(etcd: EtcdProcess, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nowhere.pem"):
        Etcd(parse_cluster(etcd.cluster("tls", cert=str(tmp_path / "nowhere.pem"))))


def test_serve_with_an_unusable_etcd_certificate_exits_with_the_reason(etcd: EtcdProcess, tmp_path: Path) -> None:
    node = start_stalkd("--dir", str(tmp_path / "n"), "--ha",
                        etcd.cluster("tls", cert=str(tmp_path / "nowhere.pem")), "--name", "n", wait=False)
    assert node.proc.wait(timeout=60) == 1
    assert "nowhere.pem" in node.log_text()
