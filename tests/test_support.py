"""The shared test helpers that find a server's port: /proc look-ups and held ports."""

from __future__ import annotations

import os
import socket

import pytest

from support import listening_ports, reserved_port


def test_listening_ports_lists_listeners_in_fd_order_and_nothing_else() -> None:
    with socket.socket() as first, socket.socket(socket.AF_INET6) as second, \
            socket.socket() as bound_only:
        first.bind(("127.0.0.1", 0))
        first.listen()
        try:
            second.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback on this machine")
        second.listen()
        bound_only.bind(("127.0.0.1", 0))
        ports = listening_ports(os.getpid())
        # Then both listeners are found (IPv4 and IPv6), the first opened first, and a socket
        # that is only bound is not
        mine = [p for p in ports if p in (first.getsockname()[1], second.getsockname()[1],
                                          bound_only.getsockname()[1])]
        assert mine == [first.getsockname()[1], second.getsockname()[1]]


def test_a_reserved_port_refuses_connections_and_lets_a_reuseaddr_server_bind() -> None:
    with reserved_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
