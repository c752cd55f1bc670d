"""Issue 11 item 2: a client that never reads its replies cannot take the host's memory.

A connection stops running commands once its queued reply bytes pass ``--max-output`` and
resumes as the client reads, so a server's memory per connection is bounded by about
``--max-output`` plus one reply. Both attacks from the issue run against a real server
process; its RSS is read from /proc, and a third client's commands must be answered while the
attackers are still connected."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from .proc import StalkdProcess, start_stalkd
from .wire import Wire, proc_status
from .wire import flood_unread as _flood
from .wire import stats as _stats

MAX_OUTPUT = 65536
MB = 2**20


@pytest.fixture
def srv() -> Iterator[StalkdProcess]:
    s = start_stalkd("--max-output", str(MAX_OUTPUT))
    try:
        yield s
    finally:
        s.stop()


def _rss(s: StalkdProcess) -> int:
    return proc_status(s.proc.pid, "VmRSS")


def _until_counted(w: Wire, key: str, at_least: int) -> dict[str, str]:
    # No clock: the server answers our stats only between the attackers' steps, so each answer
    # is a point where it has run some of their commands; a bounded number of asks.
    for _ in range(10_000):
        st = _stats(w)
        if int(st[key]) >= at_least:
            return st
    raise AssertionError(f"{key} never reached {at_least}")


def test_list_tubes_flood_of_a_client_that_never_reads_is_bounded(srv: StalkdProcess) -> None:
    with Wire(port=srv.port) as watcher, Wire(port=srv.port) as third:
        # Given 2,000 tubes with 200-character names, kept alive by one watching connection
        for i in range(2000):
            name = b"t%07d" % i + b"x" * 192
            watcher.send(b"watch " + name + b"\r\n")
        for _ in range(2000):
            assert watcher.reply().startswith(b"WATCHING ")
        assert int(_stats(third)["current-tubes"]) == 2001
        before = _rss(srv)
        # When another client sends list-tubes 2,500 times (each reply ~400 KB) and never reads
        attacker = _flood(srv.port, b"list-tubes\r\n" * 2500)
        try:
            # Then a third client is answered while the attacker is still connected
            _until_counted(third, "cmd-list-tubes", 1)
            assert third.cmd(b"put 0 0 60 2\r\nhi\r\n").startswith(b"INSERTED ")
            assert third.cmd(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED ")
            # And the server holds about one reply and --max-output for it, not 1 GB
            grown = _rss(srv) - before
            assert grown < 48 * MB, f"server RSS grew {grown / MB:.0f} MB"
            st = _stats(third)
            assert int(st["cmd-list-tubes"]) < 2500  # it stopped running the attacker's commands
        finally:
            attacker.close()


def test_twenty_stats_flooders_are_bounded_and_resume_when_read(srv: StalkdProcess) -> None:
    n_cmds = 10_000
    with Wire(port=srv.port) as third:
        before = _rss(srv)
        # Given 20 clients each sending `stats` 10,000 times (~9 MB of replies each), never reading
        flooders = [_flood(srv.port, b"stats\r\n" * n_cmds) for _ in range(20)]
        try:
            # Then the third client's commands are answered while they are connected
            _until_counted(third, "current-connections", 21)
            _until_counted(third, "cmd-stats", 500)
            assert third.cmd(b"put 0 0 60 1\r\nx\r\n").startswith(b"INSERTED ")
            # And the server's memory grew by about 20 x --max-output, not by the replies
            grown = _rss(srv) - before
            assert grown < 40 * MB, f"server RSS grew {grown / MB:.0f} MB"
            assert int(_stats(third)["cmd-stats"]) < 20 * n_cmds
            # When one flooder reads, it gets every reply, in order: it resumed
            f = flooders[0]
            f.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MB)
            f.setblocking(True)
            f.settimeout(30)
            got = b""
            while got.count(b"OK ") < n_cmds:
                chunk = f.recv(1 << 20)
                assert chunk, "closed early"
                got += chunk
            assert got.count(b"\r\n---\n") == n_cmds
        finally:
            for f in flooders:
                f.close()
