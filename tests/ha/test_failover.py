"""Automatic failover with a real etcd and real stalkd nodes on loopback: the node holding the
lease is the primary, a standby takes over by itself when the primary dies, nothing that was
acknowledged is lost, and a primary that cannot renew its lease acknowledges nothing more.

Each node runs ``stalkd serve --dir D --ha etcd+unix://.../stalkd/<cluster> --name N`` with a
short lease (``--ha-ttl 2``) so the tests take seconds. The zero-loss check is the failover
campaign's (``tests/standby/test_zero_loss.py``); ``--sync-standbys`` equals the number of
standbys, so every acknowledged record is on every standby and any of them may take over.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import stalkd
from etcdserver import EtcdProcess
from server.proc import StalkdProcess, start_stalkd
from stalkd.client import errors
from standby.cluster import admin_port, caught_up, secret_file, stats, until
from standby.test_zero_loss import Ledger, _load, check
from support import listening_ports

WAL_SIZE = "65536"
TTL = "2"


def node(etcd: EtcdProcess, d: Path, name: str, *flags: str) -> StalkdProcess:
    return start_stalkd("--dir", str(d), "-s", WAL_SIZE, "--ha", etcd.cluster(), "--name", name,
                        "--ha-ttl", TTL, "--replication-secret", secret_file(d), *flags)


def role(p: StalkdProcess) -> str:
    return str(stats(p)["role"])


_probes = iter(range(10**9))


def accepts_put(p: StalkdProcess, ledger: Ledger | None = None) -> bool:
    """Whether ``p`` acknowledges a put now (a unique body, noted in ``ledger`` as attempted,
    and as put once acknowledged)."""
    body = f"probe-{next(_probes)}".encode()
    if ledger is not None:
        ledger.attempted.add(body)
    try:
        with stalkd.Client(p.address, timeout=2) as c:
            jid = c.put(body)
    except (errors.BeanstalkError, errors.ClientConnectionError, OSError):
        return False
    if ledger is not None:
        with ledger.lock:
            ledger.put[body] = jid
    return True


def test_first_node_leads_and_the_next_follows_it(etcd: EtcdProcess, tmp_path: Path) -> None:
    a = node(etcd, tmp_path / "a", "a", "--admin", "127.0.0.1:0")
    b = node(etcd, tmp_path / "b", "b")
    try:
        assert role(a) == "primary" and role(b) == "standby"
        with stalkd.Client(a.address) as c:
            jid = c.put(b"hello")
        until(lambda: caught_up(a, b), "b to follow a", logs=(a, b))
        with stalkd.Client(b.address) as c:
            assert c.peek(jid).body == b"hello"
        # the epoch is the one allocated with the leader key (1: the first), stats say who leads
        sa, sb = stats(a), stats(b)
        assert int(sa["epoch"]) == 1
        assert sa["cluster-leader"] == sb["cluster-leader"] == "a" and sa["cluster-node"] == "a"
        assert int(sa["lease-left-ms"]) > 0 and int(sb["lease-left-ms"]) == -1
        # and /metrics: the lease's time left and the leader as a label
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port(a)}/metrics", timeout=30) as r:
            text = r.read().decode()
        left = [ln for ln in text.splitlines() if ln.startswith("stalkd_lease_seconds_left ")]
        assert left and float(left[0].split()[1]) > 0
        assert 'stalkd_cluster_info{epoch="' in text and 'leader="a"' in text
    finally:
        b.stop()
        a.stop()


def test_kill9_of_the_primary_under_load_a_standby_takes_over_and_nothing_acknowledged_is_lost(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    a = node(etcd, tmp_path / "a", "a", "--sync-standbys", "2")
    b = node(etcd, tmp_path / "b", "b", "--sync-standbys", "2")
    c = node(etcd, tmp_path / "c", "c", "--sync-standbys", "2")
    nodes = [a, b, c]
    try:
        until(lambda: stats(a).get("standbys", 0) >= 2, "both standbys to follow", logs=tuple(nodes))
        ledger = Ledger()
        stop = threading.Event()
        threads = [threading.Thread(target=_load, args=(a.address, ledger, w, stop)) for w in range(4)]
        for t in threads:
            t.start()
        until(lambda: len(ledger.put) >= 200, "load on the primary", logs=tuple(nodes))
        a.kill9()
        killed = time.monotonic()
        stop.set()
        for t in threads:
            t.join()
        # (a supervisor starts the dead node again: with --sync-standbys 2 the new primary
        # acknowledges once both others follow it)
        a2 = node(etcd, tmp_path / "a", "a", "--sync-standbys", "2")
        nodes.append(a2)
        # Then a node becomes primary by itself (nobody promotes it; whichever wins the lease:
        # the restarted one holds every acknowledged record too) ...
        survivors = (a2, b, c)
        until(lambda: any(accepts_put(p, ledger) for p in survivors), "a node to take over",
              timeout=60, logs=survivors)
        took = time.monotonic() - killed
        new = next(p for p in survivors if role(p) == "primary")
        print(f"first accepted put on the new primary {took:.2f} s after kill -9 (lease TTL {TTL} s)")
        # ... with every acknowledged job, none back from the dead, none invented
        check(new.address, ledger)
        # and the others follow it with the same jobs
        for other in survivors:
            if other is not new:
                until(lambda o=other: role(o) == "standby" and caught_up(new, o),  # type: ignore[misc]
                      "the others to follow the new primary", timeout=60, logs=(new, other))
                check(other.address, ledger)
    finally:
        for p in nodes:
            p.stop()


def test_a_paused_primary_acknowledges_nothing_after_it_wakes(etcd: EtcdProcess, tmp_path: Path) -> None:
    a = node(etcd, tmp_path / "a", "a")
    b = node(etcd, tmp_path / "b", "b")
    try:
        until(lambda: caught_up(a, b), "b to follow a", logs=(a, b))
        with stalkd.Client(a.address, timeout=30) as ca:
            ca.put(b"before")
            # Given the primary is stopped for longer than its lease, and b took over meanwhile
            os.kill(a.proc.pid, signal.SIGSTOP)
            try:
                until(lambda: accepts_put(b), "b to take over", timeout=60, logs=(b,))
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
            # When a client of the old primary writes after it wakes, nothing acknowledges it:
            # NOT_PRIMARY, or the connection closed as the node rejoins
            with pytest.raises((errors.NotPrimary, errors.ClientConnectionError)):
                ca.put(b"after the pause")
        # and the old primary rejoins as a standby of b by itself
        until(lambda: role(a) == "standby" and caught_up(b, a), "a to rejoin as b's standby",
              timeout=60, logs=(a, b))
        assert "lost the leader lease" in a.log_text() or "fenced" in a.log_text()
    finally:
        b.stop()
        a.stop()



def test_a_primary_cut_off_from_etcd_stops_acknowledging_before_the_new_one_starts(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    from etcdserver import UnixProxy

    proxy = UnixProxy(tmp_path / "a-to-etcd", etcd.socket)
    a = start_stalkd("--dir", str(tmp_path / "a"), "-s", WAL_SIZE, "--ha", proxy.address(),
                     "--name", "a", "--ha-ttl", TTL, "--replication-secret", secret_file(tmp_path / "a"))
    b = node(etcd, tmp_path / "b", "b")
    try:
        until(lambda: role(a) == "primary" and caught_up(a, b), "b to follow a", logs=(a, b))
        acks_a: list[float] = []
        stop = threading.Event()

        def load_a() -> None:  # a's clients still reach it: only its way to etcd is cut
            i = 0
            with (contextlib.suppress(errors.BeanstalkError, errors.ClientConnectionError, OSError),
                  stalkd.Client(a.address, timeout=30) as c):
                while not stop.is_set():
                    c.put(f"a-{i}".encode())
                    acks_a.append(time.monotonic())
                    i += 1

        t = threading.Thread(target=load_a)
        t.start()
        until(lambda: len(acks_a) > 50, "load on a", logs=(a,))
        proxy.cut()
        until(lambda: accepts_put(b), "b to take over", timeout=60, logs=(a, b))
        first_b = time.monotonic()
        stop.set()
        t.join()
        # a's last acknowledgement came before b's first: never two primaries acknowledging
        assert acks_a and acks_a[-1] < first_b
        print(f"a's last ack {first_b - acks_a[-1]:.2f} s before b's first")
        proxy.heal()
        until(lambda: role(a) == "standby" and caught_up(b, a), "a to rejoin b", timeout=60, logs=(a, b))
    finally:
        proxy.cut()
        b.stop()
        a.stop()


def test_a_node_that_missed_a_term_never_takes_the_lease(etcd: EtcdProcess, tmp_path: Path) -> None:
    # Given c follows a, then is stopped; a dies and b leads a new term without c
    a = node(etcd, tmp_path / "a", "a")
    b = node(etcd, tmp_path / "b", "b")
    c = node(etcd, tmp_path / "c", "c")
    procs = [a, b, c]
    try:
        until(lambda: stats(a).get("standbys", 0) >= 2, "b and c to follow a", logs=(a, b, c))
        c.stop()
        a.kill9()
        until(lambda: accepts_put(b), "b to take over", timeout=60, logs=(b,))
        b.kill9()
        # When c starts again with nobody leading, it does not campaign: its log is of a's epoch
        c2 = node_nowait(etcd, tmp_path / "c", "c")
        procs.append(c2)
        until(lambda: "not campaigning for the lease" in c2.log_text(), "c to decline", timeout=60,
              logs=(c2,))
        # Then b, which has the newest term, leads again and c follows it
        b2 = node(etcd, tmp_path / "b", "b")
        procs.append(b2)
        until(lambda: role(b2) == "primary", "b to lead again", timeout=60, logs=(b2, c2))
        until(lambda: _serving(c2) and role(c2) == "standby" and caught_up(b2, c2), "c to follow b",
              timeout=60, logs=(b2, c2))
        assert "won the leader key" not in c2.log_text()
    finally:
        for p in procs:
            p.stop()


def node_nowait(etcd: EtcdProcess, d: Path, name: str) -> StalkdProcess:
    """A node started without waiting for it to serve (it may wait for a leader first)."""
    from server.proc import SERVER_CMD, session_file

    fd, log_path = session_file("stalkd-test-", ".log")
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen([*SERVER_CMD, "-l", "127.0.0.1", "-p", "0", "--dir", str(d), "-s", WAL_SIZE,
                                 "--ha", etcd.cluster(), "--name", name, "--ha-ttl", TTL,
                                 "--replication-secret", secret_file(d)],
                                stdout=subprocess.DEVNULL, stderr=log)
    p = StalkdProcess("127.0.0.1", 0, proc)
    p.log_path = log_path
    return p


def _serving(p: StalkdProcess) -> bool:
    if p.port == 0:
        ports = listening_ports(p.proc.pid)
        if not ports:
            return False
        p.port = ports[0]
    return "serving" in p.log_text()


def test_one_of_two_sync_standbys_stops_writes_go_on_and_only_the_sync_set_takes_over(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    from stalkd.ha import Etcd, parse_cluster
    from stalkd.ha.syncset import read_sync

    addr = parse_cluster(etcd.cluster())
    client = Etcd(addr)

    def sync_members() -> tuple[str, ...]:
        s = read_sync(client, addr.key("sync"))
        return () if s is None else s.members

    a = node(etcd, tmp_path / "a", "a", "--sync-standbys", "1")
    b = node(etcd, tmp_path / "b", "b", "--sync-standbys", "1")
    c = node(etcd, tmp_path / "c", "c", "--sync-standbys", "1")
    procs = {"a": a, "b": b, "c": c}
    try:
        until(lambda: len(sync_members()) == 2, "a sync set of the primary and one standby", logs=(a, b, c))
        first = sync_members()
        assert first[0] == "a"
        member, other = first[1], ("c" if first[1] == "b" else "b")
        ledger = Ledger()
        stop = threading.Event()
        threads = [threading.Thread(target=_load, args=(a.address, ledger, w, stop)) for w in range(3)]
        for t in threads:
            t.start()
        until(lambda: len(ledger.put) >= 50, "load on a", logs=(a,))
        # When the standby in the sync set stops, the primary names the other one and goes on
        os.kill(procs[member].proc.pid, signal.SIGSTOP)
        try:
            until(lambda: sync_members() == ("a", other), f"{other} to replace {member} in the sync set",
                  timeout=60, logs=(a,))
            n = len(ledger.put)
            until(lambda: len(ledger.put) >= n + 50, "writes to go on without the stopped standby",
                  timeout=60, logs=(a,))
            # Then the primary dies: only the sync set's standby may take over, and does
            a.kill9()
            stop.set()
            for t in threads:
                t.join()
            until(lambda: role(procs[other]) == "primary", f"{other} to take over", timeout=60,
                  logs=(procs[other],))
        finally:
            os.kill(procs[member].proc.pid, signal.SIGCONT)
        # the standby that was stopped comes back as a standby of the new primary, not its rival,
        # and once it follows (it is the only one left: --sync-standbys 1) writes go on
        until(lambda: role(procs[member]) == "standby", f"{member} to follow {other}", timeout=60,
              logs=(procs[member], procs[other]))
        until(lambda: accepts_put(procs[other], ledger), f"{other} to accept writes", timeout=60,
              logs=(procs[member], procs[other]))
        check(procs[other].address, ledger)
        assert "won the leader key" not in procs[member].log_text()
    finally:
        for p in procs.values():
            p.stop()


def test_a_new_primary_names_no_sync_set_of_itself_alone_before_a_standby_counts(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    """With --sync-standbys 1 a new primary acknowledges nothing until a standby has caught up.
    It must not write a sync set naming only itself meanwhile: dying then, it would leave a
    cluster nobody may lead without a person (CI's run of docs/cluster.md's script found that:
    both standbys said ``not in the sync set (node2)`` for a minute)."""
    from stalkd.ha import Etcd, parse_cluster
    from stalkd.ha.syncset import read_sync

    addr = parse_cluster(etcd.cluster())
    a = node(etcd, tmp_path / "a", "a", "--sync-standbys", "1")
    try:
        assert role(a) == "primary"
        until(lambda: "sync set: waiting for 1 standby(s) to catch up" in a.log_text(),
              "a to look for a standby to count", logs=(a,))
        assert not accepts_put(a)  # nothing is acknowledged without a standby ...
        assert read_sync(Etcd(addr), addr.key("sync")) is None  # ... so every node stays eligible
    finally:
        a.stop()


def test_a_sync_standby_that_went_away_may_still_take_over_when_the_primary_then_dies(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    """A member of the sync set that goes away stays in it until another standby replaces it
    (nothing is acknowledged meanwhile), so when the primary dies too, the member started
    again takes over by itself."""
    from stalkd.ha import Etcd, parse_cluster
    from stalkd.ha.syncset import read_sync

    addr = parse_cluster(etcd.cluster())
    client = Etcd(addr)
    a = node(etcd, tmp_path / "a", "a", "--sync-standbys", "1")
    b = node(etcd, tmp_path / "b", "b", "--sync-standbys", "1")
    b2: StalkdProcess | None = None
    try:
        until(lambda: (s := read_sync(client, addr.key("sync"))) is not None and s.members == ("a", "b"),
              "a sync set of a and b", logs=(a, b))
        ledger = Ledger()
        until(lambda: accepts_put(a, ledger), "a to acknowledge with b", logs=(a, b))
        b.kill9()
        until(lambda: "sync set: standby b went away" in a.log_text(), "a to see b gone", logs=(a,))
        assert not accepts_put(a, ledger)
        s = read_sync(client, addr.key("sync"))
        assert s is not None and s.members == ("a", "b")
        a.kill9()
        b2 = node(etcd, tmp_path / "b", "b", "--sync-standbys", "1")
        until(lambda: role(b2) == "primary", "b to take over", timeout=60, logs=(b2,))
        check(b2.address, ledger)  # the job a acknowledged with b is there
    finally:
        for p in (b2, b, a):
            if p is not None:
                p.stop()


def test_a_node_listening_on_every_address_must_say_where_it_is_reached(etcd: EtcdProcess, tmp_path: Path) -> None:
    from server.proc import SERVER_CMD

    done = subprocess.run([*SERVER_CMD, "-l", "0.0.0.0", "-p", "0", "--plain-network-ok", "--dir", str(tmp_path / "n"),
                           "--ha", etcd.cluster(), "--name", "n"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "give --advertise HOST:PORT" in done.stderr
