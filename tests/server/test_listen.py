"""The listening socket: TCP with SO_REUSEADDR, UNIX sockets replacing only stale files."""

from __future__ import annotations

import os
import socket

import pytest

from stalkd.server.config import is_loopback as host_is_loopback
from stalkd.server.listen import ListenError, bind_listener, is_loopback


def test_tcp_listener_is_nonblocking_and_reuses_the_address() -> None:
    s = bind_listener("127.0.0.1", 0)
    try:
        assert s.getblocking() is False
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) != 0
        with socket.create_connection(s.getsockname()):  # the backlog accepts before any loop runs
            pass
    finally:
        s.close()


def test_unix_listener_refuses_to_steal_a_live_socket(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "live.sock")
    live = socket.socket(socket.AF_UNIX)
    live.bind(path)
    live.listen()
    try:
        with pytest.raises(ListenError, match="another server is listening"):
            bind_listener(f"unix:{path}", 0)
        assert os.path.exists(path)
    finally:
        live.close()


def test_unix_listener_replaces_a_stale_socket(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "stale.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)
    dead.close()
    s = bind_listener(f"unix:{path}", 0)
    try:
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(path)
    finally:
        s.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "0.0.0.0", "::1", "::"])
def test_a_bound_socket_is_loopback_where_its_address_is(host: str) -> None:
    # one rule for a bound socket and a typed host (config.is_loopback), and it is the right one
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        try:
            s.bind((host, 0))
        except OSError as e:
            pytest.skip(f"cannot bind {host}: {e}")
        assert is_loopback(s) == host_is_loopback(host) == host.startswith(("127.", "::1"))
    finally:
        s.close()
