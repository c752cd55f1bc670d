"""Fencing: after a promotion the former primary refuses to act as primary, whether it was
still running or comes back; restarted as a standby of the new primary it cuts the tail the
new primary never had (kept in quarantine/) and follows it."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import stalkd
from stalkd.engine.model import Op, decode
from stalkd.log import LogReader
from stalkd.replication import epochs

from .cluster import caught_up, primary, promote_by_signal, snapshot, standby, stats, until


def _put_raw(address: str, body: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
        return sock.recv(100)


def test_a_running_former_primary_is_fenced_and_stays_fenced(tmp_path: Path) -> None:
    p = primary(tmp_path / "p")
    s = standby(tmp_path / "s", p)
    try:
        with stalkd.Client(p.address) as c:
            c.put(b"before")
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        promote_by_signal(s)
        assert stats(s)["epoch"] == 1
        # The epoch is in the log: an EPOCH record where it began, what a restart reads back.
        ((epoch, start),) = epochs.scan(str(tmp_path / "s"))
        with LogReader(str(tmp_path / "s" / "wal"), archive=False) as r:
            rec = decode(next(iter(r.read(start))).payload)
        assert (epoch, rec.op, rec.epoch, rec.start_offset) == (1, Op.EPOCH, 1, start)
        assert _put_raw(s.address, b"new").startswith(b"INSERTED")
        # The new primary tells the old one about epoch 1 as soon as it can.
        until(lambda: _put_raw(p.address, b"old") == b"NOT_PRIMARY\r\n", "the old primary to be fenced",
              logs=(p, s))  # fmt: skip
        p.stop()
        p = primary(tmp_path / "p")  # restarted as a primary: it remembers
        assert _put_raw(p.address, b"old") == b"NOT_PRIMARY\r\n"
        assert "refuses to act as primary" in p.log_text()
    finally:
        s.stop()
        p.stop()


def test_former_primary_cuts_its_unreplicated_tail_and_follows(tmp_path: Path) -> None:
    p = primary(tmp_path / "p", "--sync-standbys", "1")
    s = standby(tmp_path / "s", p)
    held: list[bytes] = []
    try:
        with stalkd.Client(p.address) as c:
            kept = c.put(b"acknowledged")
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        s.kill9()
        written = int(stats(p)["binlog-records-written"])
        # Written to the primary's log, never acknowledged: no standby holds it.
        t = threading.Thread(target=lambda: held.append(_put_raw(p.address, b"never-acknowledged")))
        t.start()
        until(lambda: int(stats(p)["binlog-records-written"]) > written, "the held put to be written", logs=(p,))
        p.kill9()
        t.join()
        assert not held or not held[0].startswith(b"INSERTED")
        s = standby(tmp_path / "s", p)  # its primary is gone: it serves its copy
        promote_by_signal(s)
        with stalkd.Client(s.address) as c:
            after = c.put(b"after failover")
        old = standby(tmp_path / "p", s)
        try:
            until(lambda: caught_up(s, old), "the former primary to follow the new one", logs=(s, old))
            st = stats(old)
            assert (st["role"], st["epoch"]) == ("standby", 1)
            assert after > kept  # the new epoch's ids (its band) follow the old ones
            ids = [*range(1, kept + 2), after]
            jobs = snapshot(old, ids)
            assert jobs == snapshot(s, ids)
            bodies = sorted(j[3] for j in jobs.values())
            assert bodies == [b"acknowledged", b"after failover"]
            notes = list((tmp_path / "p" / "quarantine").glob("*/NOTE"))
            assert len(notes) == 1 and "never had" in notes[0].read_text()
            assert list((tmp_path / "p" / "quarantine").glob("*/wal/seg-*.log"))
            assert _put_raw(old.address, b"x") == b"NOT_PRIMARY\r\n"
        finally:
            old.stop()
    finally:
        s.stop()
        p.stop()
