"""Work that grows with the number of jobs runs in slices, and other connections are answered
between them (issue 11 item 4). Seen through the protocol on a real server process: another
client's stats-tube, answered while the work goes on, shows it part done."""

from __future__ import annotations

import select
import signal
import time
from collections.abc import Iterator

import pytest

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
        srv.proc.send_signal(signal.SIGSTOP)
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
