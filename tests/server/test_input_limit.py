"""Issue 11 item 2: clients that send a long run of commands in one burst and never read cost
the server about ``--max-output`` each, input included. The server runs their commands until
the replies queued for them reach the limit, then stops reading their sockets (what is left
stays in the kernel, where TCP's flow control holds the sender back), and carries on when they
read. Real server process; RSS from /proc; a third client is answered while they are attached."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest

from .proc import StalkdProcess, start_stalkd
from .test_output_limit import MAX_OUTPUT, MB, _rss, _stats

N_ATTACKERS = 10
CMD = b"use " + b"a" * 47 + b"\r\n"  # a short reply per command: small replies, many of them
REPLY = b"USING " + b"a" * 47 + b"\r\n"


@pytest.fixture
def srv() -> Iterator[StalkdProcess]:
    s = start_stalkd("--max-output", str(MAX_OUTPUT))
    try:
        yield s
    finally:
        s.stop()


def _attacker(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    return s


def test_bursts_of_commands_from_clients_that_never_read_are_bounded(srv: StalkdProcess) -> None:
    from .wire import Wire

    burst = CMD * 20_000  # ~1 MB a send
    with Wire(port=srv.port) as third:
        # The first commands of a fresh server import and cache things: not what is measured
        for _ in range(3):
            third.send(CMD * 1000)
            for _ in range(1000):
                assert third.reply() == REPLY
        assert third.cmd(b"use default\r\n") == b"USING default\r\n"
        _stats(third)
        before = _rss(srv)
        attackers = [_attacker(srv.port) for _ in range(N_ATTACKERS)]
        sent = [0] * N_ATTACKERS
        try:
            # Given clients that send as much as the sockets take, again and again, never reading
            last = -1
            for _ in range(500):
                for i, a in enumerate(attackers):
                    with contextlib.suppress(BlockingIOError):
                        sent[i] += a.send(burst[sent[i] % len(CMD):])
                # Each answer is a point where the server ran some of their commands
                ran = int(_stats(third)["cmd-use"])
                if ran == last:
                    break  # it ran nothing more between two of our commands: they are stopped
                last = ran
            # Then a third client's commands are answered while they are attached
            assert third.cmd(b"put 0 0 60 2\r\nhi\r\n").startswith(b"INSERTED ")
            assert third.cmd(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED ")
            # And the server stopped running their commands, holding about --max-output each
            assert int(_stats(third)["cmd-use"]) < sum(sent) // len(CMD)
            grown = _rss(srv) - before
            bound = N_ATTACKERS * 4 * MAX_OUTPUT + 2 * MB
            assert grown < bound, f"server RSS grew {grown / MB:.1f} MB (bound {bound / MB:.1f})"
            # When one of them reads, every command it sent whole is answered, in order
            a = attackers[0]
            a.setblocking(True)
            a.settimeout(30)
            want = sent[0] // len(CMD)
            got = bytearray()
            while len(got) < want * len(REPLY):
                chunk = a.recv(1 << 20)
                assert chunk, "closed early"
                got += chunk
            assert bytes(got) == REPLY * want
        finally:
            for a in attackers:
                a.close()
