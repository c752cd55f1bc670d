"""Work that grows with the number of jobs runs in slices, and other connections are answered
between them (issue 11 item 4). Seen through the protocol on a real server process: another
client's stats-tube, answered while the work goes on, shows it part done."""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Iterator

import pytest

from support import stop_process

from .proc import StalkdProcess, start_stalkd
from .wire import Wire, stats


@pytest.fixture
def srv() -> Iterator[StalkdProcess]:
    s = start_stalkd()
    try:
        yield s
    finally:
        s.stop()


def _put_many(w: Wire, n: int, delay: int, batch: int = 2000) -> None:
    assert w.cmd(b"use t\r\n") == b"USING t\r\n"
    for i in range(0, n, batch):
        k = min(batch, n - i)
        w.send(b"put 0 %d 60 1\r\nx\r\n" % delay * k)
        for _ in range(k):
            assert w.reply().startswith(b"INSERTED ")


def _counts(w: Wire) -> tuple[int, int]:
    st = stats(w, b"stats-tube t\r\n")
    return int(st["current-jobs-ready"]), int(st["current-jobs-delayed"])


def test_delays_ending_at_one_instant_are_moved_in_slices(srv: StalkdProcess) -> None:
    n = 5000
    with Wire(port=srv.port) as a, Wire(port=srv.port) as b:
        # Given n jobs whose delays all end while the server is stopped (one instant, as it sees it)
        _put_many(a, n, delay=1)
        last_put = time.monotonic()
        stop_process(srv.proc.pid)
        try:
            # Waiting for the delays to pass is what is under test, not a stand-in for a sync.
            time.sleep(max(0.0, last_put + 1.3 - time.monotonic()))
            b.send(b"stats-tube t\r\n")
        finally:
            srv.proc.send_signal(signal.SIGCONT)
        # Then the first answer sees part of them moved, not all in one step
        st = b.reply().split(b"\r\n", 1)[1].decode()
        ready = int(st.split("current-jobs-ready: ", 1)[1].split("\n", 1)[0])
        assert 0 < ready < n
        # And the rest follow, every job accounted for at every answer
        for _ in range(100_000):
            ready, delayed = _counts(b)
            assert ready + delayed == n
            if ready == n:
                break
        assert ready == n


def test_another_client_is_answered_between_the_slices_of_a_kick(srv: StalkdProcess) -> None:
    n = 20_000
    with Wire(port=srv.port) as a, Wire(port=srv.port) as b:
        _put_many(a, n, delay=3600)
        # When a kicks them all and b asks for the tube's counts until a has its reply
        a.send(b"kick %d\r\n" % n)
        seen = []
        while not select.select([a.sock], [], [], 0)[0]:
            seen.append(_counts(b))
        # Then b was answered while the kick was part done
        assert any(0 < ready < n for ready, _ in seen), seen[:3] + seen[-3:]
        assert all(ready + delayed == n for ready, delayed in seen)
        # And a's one reply counts every job
        assert a.reply() == b"KICKED %d\r\n" % n


def _reserve_all(w: Wire, n: int, batch: int = 2000) -> None:
    assert w.cmd(b"watch t\r\n") == b"WATCHING 2\r\n"
    for i in range(0, n, batch):
        k = min(batch, n - i)
        w.send(b"reserve-with-timeout 0\r\n" * k)
        for _ in range(k):
            assert w.reply().startswith(b"RESERVED ")


def _ready_reserved(reply: bytes) -> tuple[int, int]:
    st = dict(line.split(": ", 1) for line in reply.decode().splitlines() if ": " in line)
    return int(st["current-jobs-ready"]), int(st["current-jobs-reserved"])


def _hang_up_while_stopped(srv: StalkdProcess, a: Wire, b: Wire) -> tuple[int, int]:
    """Close ``a`` and send b's stats-tube while the server is stopped, so it finds both at
    once; the counts b's first answer shows."""
    stop_process(srv.proc.pid)
    try:
        a.close()
        b.send(b"stats-tube t\r\n")
    finally:
        srv.proc.send_signal(signal.SIGCONT)
    return _ready_reserved(b.reply())


def _holder(port: int, n: int) -> Wire:
    """A connection holding n reserved jobs of tube t, the later ones the more urgent (job i
    has priority n + 1 - i)."""
    a = Wire(port=port)
    assert a.cmd(b"use t\r\n") == b"USING t\r\n"
    for i in range(0, n, 2000):
        k = min(2000, n - i)
        a.send(b"".join(b"put %d 0 60 1\r\nx\r\n" % (n - j) for j in range(i, i + k)))
        for _ in range(k):
            assert a.reply().startswith(b"INSERTED ")
    _reserve_all(a, n)
    return a


def test_a_client_hanging_up_with_many_reserved_jobs_gets_them_back_in_slices(srv: StalkdProcess) -> None:
    n = 20_000
    with Wire(port=srv.port) as b:
        # Given a client holding n reserved jobs
        a = _holder(srv.port, n)
        assert b.cmd(b"watch t\r\n") == b"WATCHING 2\r\n"
        # When it hangs up, and b alternates reserve and stats-tube until all are back
        seen = [(*_hang_up_while_stopped(srv, a, b), 0)]  # (ready, reserved, b's share)
        got: list[int] = []
        for _ in range(100_000):
            reply = b.cmd(b"reserve-with-timeout 0\r\n")
            if reply.startswith(b"RESERVED "):
                got.append(int(reply.split()[1]))
            else:
                assert reply == b"TIMED_OUT\r\n" and not got  # none back yet
            seen.append((*_ready_reserved(b.cmd(b"stats-tube t\r\n")), len(got)))
            if seen[-1][1] == len(got):  # nobody but b holds any
                break
        # Then b was answered while part of the jobs were back, every job counted at every answer
        assert any(ready > 0 and reserved > mine for ready, reserved, mine in seen), seen[:3] + seen[-3:]
        assert all(ready + reserved == n for ready, reserved, _ in seen)
        # And what b reserved came out most urgent first: the last puts, newest first
        assert len(got) > 1 and got == list(range(n, n - len(got), -1))


def test_a_crash_while_a_hang_up_s_jobs_come_back_loses_none(tmp_path: os.PathLike[str]) -> None:
    d = os.fspath(tmp_path)
    n = 20_000
    s = start_stalkd("-b", d)
    try:
        with Wire(port=s.port) as b:
            a = _holder(s.port, n)
            ready, reserved = _hang_up_while_stopped(s, a, b)
            for _ in range(100_000):
                if ready > 0 and reserved > 0:
                    break
                ready, reserved = _ready_reserved(b.cmd(b"stats-tube t\r\n"))
            # Given the jobs part back when another client deletes one still held (the least
            # urgent, back last)
            assert ready > 0 and reserved > 0, (ready, reserved)
            assert b.cmd(b"delete 1\r\n") == b"DELETED\r\n"
            # When the server is killed at once
            s.kill9()
    finally:
        s.stop()
    # Then a restart finds every other job, ready, the most urgent first
    s2 = start_stalkd("-b", d)
    try:
        with Wire(port=s2.port) as w:
            assert _ready_reserved(w.cmd(b"stats-tube t\r\n")) == (n - 1, 0)
            assert w.cmd(b"peek 1\r\n") == b"NOT_FOUND\r\n"
            assert w.cmd(b"watch t\r\n") == b"WATCHING 2\r\n"
            assert w.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED %d 1\r\nx\r\n" % n
    finally:
        s2.stop()
