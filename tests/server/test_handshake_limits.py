"""Issue 30: TLS handshakes count as connections, are capped per address and have a deadline.

Connections still in the TLS handshake were unauthenticated and counted nowhere: 24,000 of
them took 1.7 GB. Here a real server with small limits: raw TCP connections that never finish
a handshake are cut past the per-address cap at once, the rest at the deadline, and once
they are gone a real TLS client is served."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from server.tlsutil import Certs, Stalkd, make_certs, start
from stalkd.client import Client


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def srv(certs: Certs) -> Iterator[Stalkd]:
    s = start("--tls-listen", "127.0.0.1:0", "--tls-cert", certs.server.cert, "--tls-key",
              certs.server.key, "--max-handshakes-per-address", "3", "--handshake-timeout", "1",
              "--max-connections", "50")
    yield s
    s.stop()


def _closed(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (EOF or reset) before the socket's timeout."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_handshakes_are_capped_per_address_and_cut_at_their_deadline(srv: Stalkd, certs: Certs) -> None:
    host, _, port = srv.tls.rpartition(":")
    # Given five connections from one address that never send a client hello
    socks = [socket.create_connection((host, int(port)), timeout=30) for _ in range(5)]
    try:
        # Then the server refuses those past the cap of 3 and names the limit
        srv.wait_log(r"TLS handshakes in progress from one address is the limit "
                     r"\(--max-handshakes-per-address\)")
        # And cuts every one of them by the deadline: none is kept open
        assert all(_closed(s) for s in socks)
    finally:
        for s in socks:
            s.close()
    # When a real client connects afterwards, its handshake is counted and done
    with Client(f"tls://{srv.tls}?ca={certs.ca.cert}") as c:
        assert c.stats()["current-connections"] == 1


def test_handshake_and_memory_flags() -> None:
    from stalkd.server.config import USAGE, parse_args

    assert "--max-handshakes-per-address" in USAGE and "--handshake-timeout" in USAGE
    assert parse_args(["--handshake-timeout", "0"]).code == 5  # type: ignore[union-attr]
    assert parse_args(["--max-memory", "1M", "-z", "16777216"]).code == 5  # type: ignore[union-attr]
    assert parse_args(["--max-memory", "64M"]).max_memory == 64 * 2**20  # type: ignore[union-attr]
