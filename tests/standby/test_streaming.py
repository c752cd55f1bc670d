"""A standby follows its primary under load and holds the same jobs, ids, tubes and states,
compared through the protocol after every burst; it refuses changes with NOT_PRIMARY."""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

import pytest

import stalkd

from .cluster import caught_up, primary, read_line, snapshot, standby, stats, until

TUBES = ("default", "emails", "reports")


def _burst(address: str, seed: int, n: int) -> None:
    """One connection's share of a burst: puts into several tubes, then reserves that end in
    delete, bury or release (so nothing stays reserved), and some long delays."""
    rng = random.Random(seed)
    with stalkd.Client(address) as c:
        for i in range(n):
            c.use(rng.choice(TUBES))
            c.put(f"{seed}-{i}".encode(), priority=rng.randrange(1000),
                  delay=3600 if rng.random() < 0.1 else 0)
        for t in TUBES:
            c.watch(t)
        for _ in range(n // 2):
            job = c.reserve(timeout=0)
            r = rng.random()
            if r < 0.5:
                c.delete(job)
            elif r < 0.75:
                c.bury(job, priority=rng.randrange(1000))
            else:
                c.release(job, priority=rng.randrange(1000))
        if rng.random() < 0.5:
            c.use(rng.choice(TUBES))
            c.kick(3)


@pytest.mark.slow
@pytest.mark.parametrize("sync", ["0", "1"])
def test_standby_holds_the_same_jobs_after_every_burst(tmp_path: Path, sync: str) -> None:
    p = primary(tmp_path / "p", "--sync-standbys", sync)
    s = standby(tmp_path / "s", p)
    try:
        for burst in range(3):
            threads = [threading.Thread(target=_burst, args=(p.address, burst * 10 + k, 60)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            until(lambda: caught_up(p, s), f"the standby to catch up after burst {burst}", logs=(p, s))
            top = int(stats(p)["total-jobs"])
            want = snapshot(p, top)
            assert want, "the burst left jobs"
            assert snapshot(s, top) == want
            for t in TUBES:
                with stalkd.Client(p.address) as a, stalkd.Client(s.address) as b:
                    pa, sb = a.stats_tube(t), b.stats_tube(t)
                keys = ("current-jobs-ready", "current-jobs-delayed", "current-jobs-buried")
                assert {k: pa[k] for k in keys} == {k: sb[k] for k in keys}
        st = stats(s)
        assert (st["role"], st["epoch"]) == ("standby", 0)
        assert stats(p)["role"] == "primary"
    finally:
        s.stop()
        p.stop()


def _raw(address: str, line: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(line)
        return read_line(sock)


def test_standby_refuses_changes_and_answers_reads(tmp_path: Path) -> None:
    p = primary(tmp_path / "p")
    s = standby(tmp_path / "s", p)
    try:
        with stalkd.Client(p.address) as c:
            c.use("emails")
            jid = c.put(b"hello")
        until(lambda: caught_up(p, s), "the standby to catch up", logs=(p, s))
        for line in (b"put 0 0 60 1\r\nx\r\n", b"reserve-with-timeout 0\r\n", b"delete %d\r\n" % jid,
                     b"bury %d 0\r\n" % jid, b"kick 1\r\n", b"kick-job %d\r\n" % jid,
                     b"touch %d\r\n" % jid, b"release %d 0 0\r\n" % jid, b"pause-tube emails 5\r\n"):
            assert _raw(s.address, line) == b"NOT_PRIMARY\r\n", line
        assert _raw(s.address, b"use emails\r\n") == b"USING emails\r\n"
        assert _raw(s.address, b"watch emails\r\n") == b"WATCHING 2\r\n"
        with stalkd.Client(s.address) as c:
            assert c.peek(jid).body == b"hello"
            assert "emails" in c.list_tubes()
            c.use("emails")
            # (any client error naming the word: the client side may give it its own class)
            with pytest.raises(Exception, match="NOT_PRIMARY"):
                c.put(b"no")
        assert stats(p)["current-jobs-ready"] == 1  # the refusal changed nothing
    finally:
        s.stop()
        p.stop()


def test_a_server_without_a_data_directory_does_not_replicate(tmp_path: Path) -> None:
    from server.proc import start_stalkd

    m = start_stalkd()
    try:
        assert _raw(m.address, b"replicate 0 0\r\n") == b"UNKNOWN_COMMAND\r\n"
    finally:
        m.stop()
