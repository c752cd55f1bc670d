"""Clients given several servers, against real processes: the first reachable primary is
used, a killed primary is left for the next server with use/watch restored, a reserve waiting
on it is resent there, and a put cut off mid-flight is reported, not resent.

Standbys: until ``stalkd serve --standby-of`` exists, the ``standby`` fixture starts a
:class:`StandIn`, a scripted peer at the socket boundary that answers as a standby does
(``stats`` with ``role: standby``, ``NOT_PRIMARY`` to anything that changes state) and, once
promoted, hands new connections to a real stalkd server. The tests only use ``.address``,
``.promote()``, ``.demote()`` (a primary fenced by a newer one) and ``.served_by`` (the
server holding the jobs once it is primary), so the fixture can start real standbys
(``--standby-of``, ``stalkd promote``) instead without touching the tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stalkd.client import Client, errors
from support import ServerProcess, reserved_port, stop_process, wait_until

from .conftest import start_tcp


def _stalkd() -> ServerProcess:
    return start_tcp("stalkd")  # returned once it serves


@pytest.fixture
def stalkd() -> Iterator[Callable[[], ServerProcess]]:
    """``start()``: a real in-memory stalkd on port 0; all are stopped (by PID) after."""
    started: list[ServerProcess] = []

    def start() -> ServerProcess:
        started.append(_stalkd())
        return started[-1]

    yield start
    for s in started:
        s.stop()


def kill(server: ServerProcess) -> None:
    """kill -9, and wait until it is gone (its sockets closed by the kernel)."""
    server.proc.kill()
    server.proc.wait()


def ready_in(server: ServerProcess, tube: str) -> int:
    with Client(server.address) as c:
        try:
            return int(c.stats_tube(tube)["current-jobs-ready"])
        except errors.NotFound:
            return 0


# --- a standby, played at the socket boundary ----------------------------------------------


class StandIn:
    """A scripted stalkd standby (see the module's docstring). ``role``/``epoch`` are what its
    ``stats`` says; with ``backend`` set, a connection accepted while it is primary is relayed
    byte for byte to that real server (which then answers everything, stats included)."""

    def __init__(self, *, role: str = "standby", epoch: int = 1,
                 backend: ServerProcess | None = None) -> None:
        self.role, self.epoch, self.backend = role, epoch, backend
        self.probes = 0  # stats answered as a standby
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def served_by(self) -> ServerProcess:
        """The server whose jobs a client sees here once this is the primary."""
        assert self.backend is not None, "a stand-in relays to a backend once promoted"
        return self.backend

    def promote(self) -> None:
        self.role = "primary"

    def demote(self) -> None:
        self.role = "standby"

    def close(self) -> None:
        # shutdown() wakes the thread blocked in accept() with an error; close() alone does
        # not on Linux, and the join then waited out its whole timeout after every test
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)
        assert not self.thread.is_alive(), "the stand-in's accept thread did not stop"
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.role == "primary" and self.backend is not None:
                up = socket.create_connection((self.backend.host, self.backend.port))
                self.conns.append(up)
                for a, b in ((conn, up), (up, conn)):
                    threading.Thread(target=self._relay, args=(a, b), daemon=True).start()
            else:
                threading.Thread(target=self._script, args=(conn,), daemon=True).start()

    @staticmethod
    def _relay(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _script(self, conn: socket.socket) -> None:
        buf = b""
        using, watching = "default", ["default"]
        with contextlib.suppress(OSError):
            while True:
                while b"\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                line, buf = buf.split(b"\r\n", 1)
                word, *args = line.decode().split(" ")
                if word == "put":  # its body follows: read it, then refuse
                    need = int(args[3]) + 2
                    while len(buf) < need:
                        buf += conn.recv(65536)
                    buf = buf[need:]
                if word == "stats":
                    self.probes += 1
                    body = f"---\nrole: {self.role}\nepoch: {self.epoch}\n".encode()
                    reply = b"OK %d\r\n%s\r\n" % (len(body), body)
                elif word == "use":
                    using = args[0]
                    reply = f"USING {using}\r\n".encode()
                elif word in ("watch", "ignore"):
                    if word == "watch" and args[0] not in watching:
                        watching.append(args[0])
                    elif word == "ignore" and args[0] in watching and len(watching) > 1:
                        watching.remove(args[0])
                    reply = f"WATCHING {len(watching)}\r\n".encode()
                elif word == "quit":
                    return
                else:  # this stand-in is never a working primary itself
                    reply = b"NOT_PRIMARY\r\n"
                conn.sendall(reply)


@pytest.fixture
def standby() -> Iterator[Callable[..., StandIn]]:
    """``make(role="standby", epoch=1, backend=None)``: a standby (see :class:`StandIn`)."""
    made: list[StandIn] = []

    def make(**kw: Any) -> StandIn:
        made.append(StandIn(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


# --- finding the primary ---------------------------------------------------------------


def test_a_dead_first_address_is_skipped(stalkd: Any, connect: Any) -> None:
    # Given a list whose first server refuses connections
    second = stalkd()
    with reserved_port() as dead:
        # When a client connects, Then it uses the second, and works there
        c = connect(f"127.0.0.1:{dead},{second.address}")
        jid = c.put(b"hello", tube="t")
        assert str(c.address) == second.address
        assert c.peek(jid).body == b"hello"


def test_a_standby_is_skipped_for_the_primary(stalkd: Any, standby: Any, connect: Any) -> None:
    primary = stalkd()
    s = standby()
    c = connect(f"{s.address},{primary.address}")
    c.put(b"x", tube="t")
    assert str(c.address) == primary.address and s.probes >= 1
    assert ready_in(primary, "t") == 1


def test_no_primary_anywhere_is_an_error_naming_what_each_server_said(standby: Any,
                                                                      connect: Any) -> None:
    s = standby()
    with reserved_port() as dead, pytest.raises(errors.NoPrimary) as e:
        connect(f"{s.address},127.0.0.1:{dead}", failover_timeout=0.2)
    assert f"{s.address}: standby (epoch 1)" in str(e.value)
    assert f"127.0.0.1:{dead}: [Errno 111]" in str(e.value)  # connection refused


# --- following a failover --------------------------------------------------------------


def test_killing_the_primary_moves_the_client_on_with_use_and_watch(stalkd: Any,
                                                                   connect: Any) -> None:
    # Given a client on the first of two servers, using 'u' and watching only 'w'
    first, second = stalkd(), stalkd()
    c = connect(f"{first.address},{second.address}")
    c.use("u")
    c.watch("w")
    c.ignore("default")
    c.put(b"before")
    # When the first is killed while the client is idle
    kill(first)
    # Then the next put goes to the second, with the same tubes
    c.put(b"after")
    assert str(c.address) == second.address
    assert ready_in(second, "u") == 1
    assert c.list_tube_used() == "u" and c.list_tubes_watched() == ["w"]


def test_a_reserve_waiting_on_a_killed_primary_is_resent_to_the_next(stalkd: Any,
                                                                     connect: Any) -> None:
    first, second = stalkd(), stalkd()
    c = connect(f"{first.address},{second.address}")
    c.watch("w")
    got: list[Any] = []
    # daemon: a reserve that never returns must fail this test, not hang the run
    t = threading.Thread(target=lambda: got.append(c.reserve(timeout=60)), daemon=True)
    t.start()
    with Client(first.address) as probe:
        wait_until(lambda: probe.stats()["current-waiting"] == 1, "the reserve to wait")
    kill(first)
    with Client(second.address) as other:
        jid = other.put(b"job", tube="w")
    t.join(60)
    assert not t.is_alive(), "the reserve did not come back"
    assert [(j.id, j.body) for j in got] == [(jid, b"job")]


def received_but_unread(server: ServerProcess) -> int:
    """Bytes waiting in the kernel for ``server``'s accepted connections (/proc/net/tcp)."""
    total = 0
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{server.proc.pid}/net/{table}") as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == server.port:
                    total += int(fields[4].split(":")[1], 16)
    return total


def test_a_put_cut_off_mid_flight_is_not_resent_and_says_so(stalkd: Any, connect: Any) -> None:
    # Given a client on the first of two servers, which stops reading
    first, second = stalkd(), stalkd()
    c = connect(f"{first.address},{second.address}")
    c.use("t")
    stop_process(first.proc.pid)
    # When the server dies once the put has reached it, before it could answer
    def killer() -> None:
        wait_until(lambda: received_but_unread(first) > 0, "the put to arrive")
        kill(first)
    t = threading.Thread(target=killer)
    t.start()
    try:
        # Then the put raises OutcomeUnknown, naming the command, and is not resent
        with pytest.raises(errors.OutcomeUnknown, match=r"'put \d+ 0 120 4' may or may not"):
            c.put(b"once")
    finally:
        t.join(30)
        with contextlib.suppress(ProcessLookupError):
            os.kill(first.proc.pid, signal.SIGKILL)
    assert ready_in(second, "t") == 0
    # and the next call goes to the second server
    c.put(b"again")
    assert ready_in(second, "t") == 1


def test_a_promoted_standby_takes_over_after_the_primary_dies(stalkd: Any, standby: Any,
                                                              connect: Any) -> None:
    # Given a primary and a standby (that relays to a real server once promoted)
    primary, backing = stalkd(), stalkd()
    s = standby(backend=backing)
    c = connect(f"{primary.address},{s.address}", failover_timeout=60)
    c.use("t")
    kill(primary)
    # When the standby is promoted while the client is looking for a primary
    seen = s.probes

    def promote() -> None:
        wait_until(lambda: s.probes > seen, "the client to ask the standby")
        s.promote()
    t = threading.Thread(target=promote)
    t.start()
    c.put(b"after failover")
    t.join(30)
    # Then the put lands there, in the tube in use
    assert str(c.address) == s.address
    assert ready_in(s.served_by, "t") == 1


def test_not_primary_sends_the_command_to_the_new_primary_once(stalkd: Any, standby: Any,
                                                              connect: Any) -> None:
    # Given a client on a primary of epoch 1 (beside a server that counts as epoch 0)
    fenced = standby(role="primary", epoch=1)
    newer = stalkd()
    c = connect(f"{newer.address},{fenced.address}")
    c.use("t")
    assert str(c.address) == fenced.address
    # When that primary is fenced, Then a put answered NOT_PRIMARY goes to the other, once
    fenced.demote()
    c.put(b"x")
    assert str(c.address) == newer.address
    assert ready_in(newer, "t") == 1
    # and so do the NOT_PRIMARY puts of a pipelined batch
    fenced.promote()
    c2 = connect(f"{newer.address},{fenced.address}")
    fenced.demote()
    assert len(c2.put_many([b"a", b"b", b"c"], tube="t")) == 3
    assert ready_in(newer, "t") == 4


def test_one_address_keeps_the_plain_client_behaviour(standby: Any, connect: Any) -> None:
    s = standby()
    c = connect(s.address)  # no stats probe: connects as it always did
    assert s.probes == 0
    with pytest.raises(errors.NotPrimary, match="give the client every server's address"):
        c.put(b"x")


def test_cli_commands_take_the_address_list(stalkd: Any, standby: Any) -> None:
    import subprocess
    import sys

    def run(*args: str, addr: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "STALKD_ADDR"}
        if addr is not None:
            env["STALKD_ADDR"] = addr
        return subprocess.run([sys.executable, "-m", "stalkd.cli", *args], capture_output=True,
                              text=True, env=env, timeout=60)

    server, s = stalkd(), standby()
    with reserved_port() as dead:
        # -a repeated, and a comma list in $STALKD_ADDR: the standby and the dead one are skipped
        p = run("put", "-t", "t", "-a", f"127.0.0.1:{dead},{s.address}", "-a", server.address,
                "hello")
        assert p.returncode == 0, p.stderr
        p = run("stats-tube", "t", "--json", addr=f"{s.address},{server.address}")
        assert p.returncode == 0 and '"current-jobs-ready": 1' in p.stdout
        # no primary among them: unreachable, saying what each server is
        p = run("put", "-a", f"{s.address},127.0.0.1:{dead}", "--failover-timeout", "0.2", "x")
        assert p.returncode == 3 and "standby (epoch 1)" in p.stderr and "Traceback" not in p.stderr
