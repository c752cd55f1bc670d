"""The server tests' wire helper: waiting for silence or EOF leaves the socket as it was."""

from __future__ import annotations

import socket

from server.wire import Wire


def _wire(sock: socket.socket) -> Wire:
    w = Wire.__new__(Wire)
    w.sock, w.buf = sock, b""
    return w


def test_quiet_and_closed_restore_the_sockets_timeout() -> None:
    ours, peer = socket.socketpair()
    with peer, _wire(ours) as w:
        ours.settimeout(10.0)
        # Given a connection opened to wait 10 s; When it waits briefly for silence
        assert w.quiet(0.01)
        # Then a later reply still waits 10 s, not the 0.01 s just used
        assert ours.gettimeout() == 10.0
        # And the same after data arrives during the wait
        peer.sendall(b"OK\r\n")
        assert not w.quiet(5.0)
        assert ours.gettimeout() == 10.0
        # And after waiting for an EOF that does not come, or that does
        assert not w.closed(0.01)
        assert ours.gettimeout() == 10.0
        peer.close()
        assert w.closed(5.0)
        assert ours.gettimeout() == 10.0
