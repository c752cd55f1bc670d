"""A reply held for a sync standby when the primary's lease runs out (found by the fault
campaign's ``ha`` topology, ``campaign/hacluster.py``).

Three ``--ha`` nodes, ``--sync-standbys 2``: a put on the primary is written to its log and
streamed, and its reply waits for both standbys. One standby is paused, so the reply stays held;
the primary's way to etcd is cut, its lease runs out, and another node is promoted. The client
must not be told ``NOT_PRIMARY`` for that put: the client library (``stalkd.client._failover``)
reads ``NOT_PRIMARY`` as "the server applied nothing" and resends the command to the new
primary, yet the put is in the old primary's log and on the standby that was promoted, so it
would be applied twice (a delete resent meets its own effect: ``NOT_FOUND``). The honest answer
for a write whose fate the node can no longer vouch for is no answer: a closed connection,
which the client reports as an unknown outcome and never resends.

The second case: a primary resumed after a pause past its lease, whose threads have not
noticed yet, must not hand out a job (``Role.lease``, asked per command).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from etcdserver import EtcdProcess, UnixProxy
from server.proc import StalkdProcess, start_stalkd
from stalkd.client import errors
from standby.cluster import secret_file, stats, until

NAMES = ("a", "b", "c")


@contextlib.contextmanager
def _cluster(etcd: EtcdProcess, tmp: Path, sync: int) -> Iterator[tuple[dict[str, StalkdProcess], dict[str, UnixProxy]]]:
    """Three --ha nodes, ``a`` the primary and ``b``, ``c`` following it, each through its own relay to etcd."""
    proxies = {n: UnixProxy(tmp / f"{n}-etcd", etcd.socket) for n in NAMES}
    nodes: dict[str, StalkdProcess] = {}

    def start(n: str) -> None:
        nodes[n] = start_stalkd("--dir", str(tmp / n), "-s", "65536", "--ha", proxies[n].address(),
                                "--name", n, "--ha-ttl", "2", "--sync-standbys", str(sync),
                                "--replication-secret", secret_file(tmp / n))

    try:
        start("a")
        until(lambda: _role(nodes["a"]) == "primary", "a to lead", timeout=60)
        start("b")
        start("c")
        until(lambda: int(stats(nodes["a"]).get("standbys", 0)) == 2
              and int(stats(nodes["a"]).get("standby-lag", 1)) == 0, "b and c to follow a", timeout=60)
        yield nodes, proxies
    finally:
        for p in proxies.values():
            p.cut()
        for node in nodes.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.proc.pid, signal.SIGCONT)
            node.stop()


def _role(node: StalkdProcess) -> str:
    try:
        return str(stats(node)["role"])
    except (errors.ClientConnectionError, errors.BeanstalkError, OSError):
        return "down"


@pytest.mark.slow
def test_a_put_held_when_the_lease_runs_out_is_not_answered_not_primary(etcd: EtcdProcess, tmp_path: Path) -> None:
    with _cluster(etcd, tmp_path, 2) as (nodes, proxies):
        os.kill(nodes["c"].proc.pid, signal.SIGSTOP)  # its acknowledgement never comes
        with socket.create_connection(("127.0.0.1", nodes["a"].port), timeout=30) as s:
            s.sendall(b"put 0 0 10 4\r\nheld\r\n")
            proxies["a"].cut()  # the lease runs out while the reply is held
            reply = s.makefile("rb").readline()
        until(lambda: _role(nodes["b"]) == "primary", "b to be promoted", timeout=60)
        with socket.create_connection(("127.0.0.1", nodes["b"].port), timeout=30) as s:
            s.sendall(b"peek-ready\r\n")
            on_b = s.makefile("rb").readline()
        # the put is on the new primary (it was in a's log and streamed to b before the cut)...
        assert on_b.startswith(b"FOUND "), on_b
        # ...so a must not have told its client that it applied nothing
        assert reply != b"NOT_PRIMARY\r\n", (reply, on_b)


@pytest.mark.slow
def test_a_primary_resumed_after_its_lease_ran_out_hands_out_no_job(etcd: EtcdProcess, tmp_path: Path) -> None:
    with _cluster(etcd, tmp_path, 1) as (nodes, proxies):
        with socket.create_connection(("127.0.0.1", nodes["a"].port), timeout=30) as s:
            f = s.makefile("rb")
            s.sendall(b"put 0 0 10 3\r\njob\r\n")
            assert f.readline().startswith(b"INSERTED "), "the put"
            os.kill(nodes["a"].proc.pid, signal.SIGSTOP)  # past its lease: another node takes over
            until(lambda: _role(nodes["b"]) == "primary" or _role(nodes["c"]) == "primary",
                  "a new primary", timeout=60)
            os.kill(nodes["a"].proc.pid, signal.SIGCONT)
            s.sendall(b"reserve-with-timeout 0\r\n")  # at once, on a connection it already had
            reply = f.readline()
        # the job is the new primary's to hand out; the deposed one must not hold it for a worker
        assert not reply.startswith(b"RESERVED "), reply

