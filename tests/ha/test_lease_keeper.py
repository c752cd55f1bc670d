"""The lease keeper against a real etcd: one holder at a time, a holder that stops renewing
stops acknowledging before anyone else can win, epochs only grow, resignation hands over."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from etcdserver import EtcdProcess, start_etcd
from stalkd.ha import Etcd, LeaseKeeper, parse_cluster
from stalkd.ha.etcd import EtcdUnavailable


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    server = start_etcd(tmp_path_factory.mktemp("etcd"))
    try:
        yield server
    finally:
        server.stop()


def keeper(etcd: EtcdProcess, cluster: str, name: str, **kw: object) -> LeaseKeeper:
    addr = parse_cluster(etcd.cluster(cluster))
    return LeaseKeeper(Etcd(addr, timeout=0.5), addr.key("leader"), name,
                       {"replication": f"{name}:11300"}, ttl=2, poll=0.05, **kw)  # type: ignore[arg-type]


def drive(*keepers: LeaseKeeper, until: Callable[[], bool], timeout: float = 20.0) -> None:
    """Turn the keepers' loops (as their threads would) until ``until()`` holds."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(min(0.05, *(k.step() for k in keepers)))


def test_one_holder_and_the_others_follow_it(etcd: EtcdProcess) -> None:
    a, b = keeper(etcd, "one", "a"), keeper(etcd, "one", "b")
    a.step()
    b.step()
    assert a.may_acknowledge() and not b.may_acknowledge()
    assert a.leader is not None and a.leader.mine
    assert b.leader is not None and not b.leader.mine and b.leader.name == "a"
    assert b.leader.info["replication"] == "a:11300" and b.leader.epoch == a.leader.epoch
    a.resign()


def test_a_holder_that_stops_renewing_stops_acknowledging_before_another_wins(etcd: EtcdProcess) -> None:
    # Given a holds the key and then renews nothing more (paused, or cut off from etcd)
    a, b = keeper(etcd, "pause", "a"), keeper(etcd, "pause", "b")
    a.step()
    assert a.leader is not None
    first_epoch = a.leader.epoch
    # When b keeps looking until it wins
    drive(b, until=lambda: b.may_acknowledge())
    won_at = time.monotonic()
    # Then a had stopped acknowledging before b won, and b's epoch is larger
    assert not a.may_acknowledge()
    assert a.time_left() == 0.0
    assert b.leader is not None and b.leader.mine and b.leader.epoch == first_epoch + 1
    hold = a._hold
    assert hold is not None and hold.until < won_at
    # and a, turning its loop again, sees that it lost and follows b
    a.step()
    a.step()
    assert a.leader is not None and a.leader.name == "b" and not a.may_acknowledge()
    b.resign()


def test_resigning_hands_the_key_over_at_once(etcd: EtcdProcess) -> None:
    a, b = keeper(etcd, "switch", "a"), keeper(etcd, "switch", "b")
    a.step()
    b.step()
    a.resign()
    assert not a.may_acknowledge()
    b.step()  # no TTL to wait out: the key went with the revoked lease
    assert b.may_acknowledge()
    b.resign()


def test_a_node_that_may_not_lead_never_takes_the_key(etcd: EtcdProcess) -> None:
    behind = keeper(etcd, "sync", "behind", eligible=lambda: False)
    for _ in range(5):
        behind.step()
    assert behind.leader is None and not behind.may_acknowledge()
    ok = keeper(etcd, "sync", "ok")
    ok.step()
    behind.step()
    assert behind.leader is not None and behind.leader.name == "ok"
    ok.resign()


def test_a_holder_cut_off_from_etcd_stops_acknowledging_by_itself(etcd: EtcdProcess) -> None:
    a = keeper(etcd, "cut", "a")
    a.step()
    assert a.may_acknowledge()
    seen: list[object] = []
    a.on_change = seen.append
    etcd.pause()
    try:
        drive(a, until=lambda: not a.may_acknowledge())
        assert a.last_error is not None
    finally:
        etcd.resume()
    drive(a, until=lambda: seen == [None])


def test_no_member_answering_is_an_error_naming_them(tmp_path: Path) -> None:
    sock = quote(str(tmp_path / "none:1"), safe="")
    client = Etcd(parse_cluster(f"etcd+unix://{sock}/stalkd/x"), timeout=0.2)
    with pytest.raises(EtcdUnavailable, match="none:1"):
        client.get("/k")


@pytest.mark.parametrize("text, message", [
    ("http://h:2379/stalkd/x", "not a cluster address"),
    ("etcd://h:2379", "no cluster prefix"),
    ("etcd://h:2379/", "no cluster prefix"),
    ("etcd://h:99999/stalkd/x", "is not HOST:PORT"),
    ("etcd://h1,,h2/stalkd/x", "an empty etcd address"),
])
def test_bad_cluster_addresses_say_what_to_write(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cluster(text)


def test_ipv6_members_and_default_port() -> None:
    a = parse_cluster("etcds://[::1]:2379,h2/stalkd/c")
    assert [(e.scheme, e.host, e.port) for e in a.endpoints] == [("https", "::1", 2379), ("https", "h2", 2379)]


def test_only_the_leader_of_an_epoch_writes_the_sync_set(etcd: EtcdProcess) -> None:
    from stalkd.ha.decide import eligible
    from stalkd.ha.syncset import SyncSet, read_sync, write_sync

    addr = parse_cluster(etcd.cluster("syncset"))
    a, b = keeper(etcd, "syncset", "a"), keeper(etcd, "syncset", "b")
    a.step()
    assert a.leader is not None
    epoch, rev = a.leader.epoch, a.leader.revision
    client = Etcd(addr)
    assert read_sync(client, addr.key("sync")) is None
    assert write_sync(client, addr.key("sync"), SyncSet("a", epoch, ("a", "b"), rev),
                      leader_key=addr.key("leader"))
    got = read_sync(client, addr.key("sync"))
    assert got == SyncSet("a", epoch, ("a", "b"))
    assert eligible("b", got.members, 1) and not eligible("c", got.members, 1)
    # a's lease gone: a write under its old epoch is refused
    a.resign()
    b.step()
    assert not write_sync(client, addr.key("sync"), SyncSet("a", epoch, ("a",), rev), leader_key=addr.key("leader"))
    assert read_sync(client, addr.key("sync")) == got
    b.resign()
