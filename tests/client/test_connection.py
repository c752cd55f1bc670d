"""Connection life: failures surface as connection errors, the client never reads a stale
reply, and reconnecting restores the used tube and the watch list."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stalkd.client import AsyncClient, Client, errors
from support import ServerProcess


class FakeServer:
    """A loopback peer that is not a well-behaved beanstalkd (a true boundary to fake):
    ``behave(conn)`` runs for each accepted connection on a thread."""

    def __init__(self, behave: Callable[[socket.socket], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)  # accept() is not woken by close() from another thread
        self.stopped = threading.Event()
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.behave = behave
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.conns.append(conn)
            self.behave(conn)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def fake() -> Iterator[Callable[[Callable[[socket.socket], None]], FakeServer]]:
    servers: list[FakeServer] = []

    def make(behave: Callable[[socket.socket], None]) -> FakeServer:
        servers.append(FakeServer(behave))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def silent(conn: socket.socket) -> None:
    pass  # accept, read nothing, answer nothing


def garbage(conn: socket.socket) -> None:
    conn.recv(100)
    conn.sendall(b"HELLO THERE\r\n")


def half_reply(conn: socket.socket) -> None:
    conn.recv(100)
    conn.sendall(b"RESERVED 1 10\r\nabc")
    conn.close()


def test_nothing_listening_is_connection_failed_naming_the_address(held_port: int) -> None:
    port = held_port  # bound, never listening: connecting is refused
    with pytest.raises(errors.ConnectionFailed, match=f"127.0.0.1:{port}"):
        Client(f"127.0.0.1:{port}", timeout=2)
    with pytest.raises(errors.ConnectionFailed, match=f"127.0.0.1:{port}"):
        asyncio.run(AsyncClient(f"127.0.0.1:{port}", timeout=2).connect())


@pytest.mark.parametrize(("behave", "exc"), [
    (silent, errors.ReplyTimeout),
    (garbage, errors.ProtocolError),
    (half_reply, errors.ConnectionClosed),
])
def test_bad_peers_give_connection_errors_and_drop_the_socket(
        fake: Any, connect: Any, behave: Any, exc: type[Exception]) -> None:
    server = fake(behave)
    c = connect(server.address, timeout=0.3)
    with pytest.raises(exc):
        c.stats()
    assert not c.connected
    assert isinstance(exc(), errors.ClientConnectionError)


def times_out_once(conn: socket.socket) -> None:
    conn.recv(100)
    conn.sendall(b"TIMED_OUT\r\n")  # the first request (a reserve) answered, then silence


def test_an_async_reply_timeout_after_a_longer_one_fires_on_its_own_deadline(fake: Any) -> None:
    server = fake(times_out_once)

    async def main() -> None:
        c = AsyncClient(server.address, timeout=0.2)
        try:
            # Given a reserve whose reply was due within 600.2 s, answered at once
            with pytest.raises(errors.TimedOut):
                await c.reserve(timeout=600)
            # When the next call, due within 0.2 s, gets no reply
            # Then it times out on its own deadline, long before the reserve's would have come
            with pytest.raises(errors.ReplyTimeout, match="within 0.2s"):
                await asyncio.wait_for(c.stats(), 30)
        finally:
            await c.close()

    asyncio.run(main())


def test_reserve_waits_its_own_timeout_beyond_the_client_timeout(server: ServerProcess,
                                                                  connect: Any) -> None:
    # Given a client whose reply timeout is shorter than the reserve timeout
    c = connect(server, timeout=1.0)
    # Then the server's TIMED_OUT arrives, not a client-side ReplyTimeout (a whole second of
    # slack on each side, so a loaded machine cannot flip the outcome)
    with pytest.raises(errors.TimedOut):
        c.reserve(timeout=2)
    assert c.connected


def test_server_restart_reconnects_and_restores_tubes(start_server: Any, connect: Any,
                                                      held_port: int) -> None:
    # Given a client using 'u' and watching only 'w' on a server, on a port held for the test
    # (nothing else can take it while the server is down)
    port = held_port
    first = start_server(port=port)
    c = connect(first)
    c.use("u")
    c.watch("w")
    c.ignore("default")
    # When the server restarts on the same port
    first.stop()
    start_server(port=port)
    # Then the call in flight fails (its effect unknown, so not retried) ...
    with pytest.raises(errors.ClientConnectionError):
        c.list_tube_used()
    # ... and the next one reconnects with the tubes restored
    assert c.list_tube_used() == "u"
    assert c.list_tubes_watched() == ["w"]
    jid = c.put(b"after restart")
    assert c.peek(jid).body == b"after restart"


def test_without_reconnect_a_dropped_client_stays_closed(start_server: Any, connect: Any,
                                                         held_port: int) -> None:
    port = held_port
    first = start_server(port=port)
    c = connect(first, reconnect=False)
    first.stop()
    start_server(port=port)
    with pytest.raises(errors.ClientConnectionError):
        c.stats()
    with pytest.raises(errors.ConnectionClosed, match="reconnect=False"):
        c.stats()


def test_quit_releases_reserved_jobs(server: ServerProcess, connect: Any) -> None:
    a = connect(server)
    jid = a.put(b"q", ttr=100)
    a.reserve(timeout=0)
    a.quit()
    assert not a.connected
    assert connect(server).reserve(timeout=5).id == jid


def test_async_cancelled_reserve_drops_connection_and_loses_nothing(server: ServerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.address) as c:
            # Given a task blocked in reserve
            waiter = asyncio.create_task(c.reserve())
            await asyncio.sleep(0)  # let it send its reserve
            # When it is cancelled
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert not c.connected
            # Then a later put and reserve on the same client pair up correctly
            jid = await c.put(b"x")
            job = await c.reserve(timeout=5)
            assert (job.id, job.body) == (jid, b"x")

    asyncio.run(scenario())


def test_async_concurrent_calls_get_their_own_replies(server: ServerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.address) as c:
            bodies = [f"b{i}".encode() for i in range(50)]
            ids = await asyncio.gather(*(c.put(b) for b in bodies))
            assert len(set(ids)) == 50
            peeked = await asyncio.gather(*(c.peek(i) for i in ids))
            assert [j.body for j in peeked] == bodies

    asyncio.run(scenario())


def test_import_of_client_stays_light() -> None:
    # the sync client and the CLI start without asyncio, nor dataclasses (which imports inspect)
    import subprocess
    import sys

    code = ("import sys, stalkd.client, stalkd.client.cli; "
            "print([m for m in ('asyncio', 'dataclasses') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"



def test_unix_socket_address(start_unix_server: Any, connect: Any, tmp_path: Any) -> None:
    # Given a server listening on a UNIX socket (beanstalkd's -l unix:PATH)
    path = tmp_path / "q.sock"
    start_unix_server(str(path))
    # When a client connects with a unix: address
    c = connect(f"unix:{path}", timeout=5)
    # Then it works as over TCP
    jid = c.put(b"over unix")
    assert c.peek(jid).body == b"over unix"
    assert str(c.address) == f"unix:{path}"


def test_async_client_on_uvloop(server: ServerProcess) -> None:
    # uvloop's transports are not asyncio.Transport subclasses; the server and workers run on it
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> None:
        async with AsyncClient(server.address) as c:
            await c.use("u")
            await c.watch("u")
            ids = await c.put_many([b"a", b"b"])
            assert await asyncio.gather(c.put(b"c"), c.put(b"d")) == [ids[1] + 1, ids[1] + 2]
            job = await c.reserve(timeout=5)
            assert (job.id, job.body) == (ids[0], b"a")
            await c.delete(job)
            with pytest.raises(errors.NotFound):
                await c.delete(job)

    uvloop.run(scenario())


def test_sync_client_refuses_a_second_thread_mid_call(server: ServerProcess) -> None:
    import time

    # Given a Client blocked in reserve on one thread
    c = Client(server.address)
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(c.reserve(timeout=30)))
    t.start()
    with Client(server.address) as other:
        deadline = time.monotonic() + 10
        while other.stats()["current-waiting"] != 1:
            assert time.monotonic() < deadline, "the reserve never reached the server"
        # When another thread uses the same Client
        with pytest.raises(RuntimeError, match="one thread at a time"):
            c.stats()
        # Then the waiting call is undisturbed and still gets its own reply
        jid = other.put(b"for the waiter")
    t.join(30)
    assert got and got[0].id == jid and got[0].body == b"for the waiter"
    c.close()


def test_abort_from_another_thread_ends_a_blocked_reserve_and_releases_jobs(
        server: ServerProcess) -> None:
    # Given a client holding a reserved job and blocked in a second reserve with no timeout
    with Client(server.address, timeout=30.0) as producer:
        producer.put(b"held", ttr=100)
    worker = Client(server.address, timeout=30.0)
    held = worker.reserve(timeout=0)
    outcome: list[BaseException | None] = []

    def blocked() -> None:
        try:
            worker.reserve()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test inspects what ended the call
            outcome.append(exc)

    t = threading.Thread(target=blocked)
    t.start()
    # When another thread aborts it
    with Client(server.address, timeout=30.0) as other:
        # (the blocked reserve is registered once the server counts a waiting connection)
        while other.stats()["current-waiting"] < 1:
            pass
        worker.abort()
        t.join(timeout=30)
        # Then the blocked call ends with a connection error, not a reply
        assert not t.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], errors.ClientConnectionError)
        assert not worker.connected
        # And the server released the aborted connection's job, with no TTR to wait out
        job = other.reserve(timeout=20)
        assert (job.id, job.body) == (held.id, b"held")
        other.delete(job)
