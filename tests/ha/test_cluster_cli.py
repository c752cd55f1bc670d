"""``stalkd cluster status`` and ``stalkd cluster switchover`` on a real two-node cluster, run
as a person runs them (the command line, its output and exit status)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from pathlib import Path

from etcdserver import EtcdProcess
from server.proc import StalkdProcess, start_stalkd
from stalkd.client import errors
from standby.cluster import caught_up, secret_file, stats, until
from standby.test_zero_loss import Ledger, _load, check

CLI = [sys.executable, "-m", "stalkd.cli", "cluster"]


def node(etcd: EtcdProcess, d: Path, name: str, *flags: str) -> StalkdProcess:
    return start_stalkd("--dir", str(d), "-s", "65536", "--ha", etcd.cluster(), "--name", name,
                        "--ha-ttl", "2", "--replication-secret", secret_file(d), *flags)


def load(address: str, ledger: Ledger, worker: int, stop: threading.Event) -> None:
    """The failover campaign's load; it ends at NOT_PRIMARY too (the primary handed over)."""
    with contextlib.suppress(errors.NotPrimary):
        _load(address, ledger, worker, stop)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_status_shows_the_leader_its_lease_and_every_node(etcd: EtcdProcess, tmp_path: Path) -> None:
    a = node(etcd, tmp_path / "a", "a")
    b = node(etcd, tmp_path / "b", "b")
    try:
        until(lambda: caught_up(a, b), "b to follow a", logs=(a, b))
        out = cli("status", etcd.cluster())
        assert out.returncode == 0, out.stderr
        assert "leader: a (epoch" in out.stdout and "s left" in out.stdout
        lines = {ln.split()[0]: ln.split() for ln in out.stdout.splitlines()[2:]}
        assert lines["a"][1] == "primary" and lines["b"][1] == "standby"
        b.stop()
        st = json.loads(cli("status", etcd.cluster(), "--json").stdout)
        assert st["nodes"]["b"]["role"] == "down" and st["nodes"]["a"]["role"] == "primary"
    finally:
        b.stop()
        a.stop()


def test_a_bad_address_or_an_unreachable_etcd_is_a_clear_error(tmp_path: Path) -> None:
    out = cli("status", "etcd://127.0.0.1:2379")
    assert out.returncode == 2 and "no cluster prefix" in out.stderr
    sock = tmp_path / "nothing"
    out = cli("status", f"etcd+unix://{str(sock).replace('/', '%2F')}/stalkd/x")
    assert out.returncode == 3 and "no etcd member answered" in out.stderr


def test_switchover_under_load_loses_nothing_and_the_old_primary_follows(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    a = node(etcd, tmp_path / "a", "a", "--sync-standbys", "1")
    b = node(etcd, tmp_path / "b", "b", "--sync-standbys", "1")
    try:
        until(lambda: caught_up(a, b), "b to follow a", logs=(a, b))
        ledger = Ledger()
        stop = threading.Event()
        threads = [threading.Thread(target=load, args=(a.address, ledger, w, stop)) for w in range(4)]
        for t in threads:
            t.start()
        until(lambda: len(ledger.put) >= 100, "load on a", logs=(a, b))
        out = cli("switchover", etcd.cluster(), "--to", "b")
        stop.set()
        for t in threads:
            t.join()
        assert out.returncode == 0, out.stderr + a.log_text() + b.log_text()
        assert "switched over: b is the primary" in out.stdout
        assert stats(b)["role"] == "primary"
        check(b.address, ledger)
        until(lambda: stats(a)["role"] == "standby" and caught_up(b, a), "a to follow b", timeout=60,
              logs=(a, b))
        again = cli("switchover", etcd.cluster(), "--to", "b")
        assert again.returncode == 0 and "already the primary" in again.stdout
        nobody = cli("switchover", etcd.cluster(), "--to", "zed")
        assert nobody.returncode == 2 and "no node 'zed'" in nobody.stderr
    finally:
        b.stop()
        a.stop()
