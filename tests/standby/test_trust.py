"""Standbys you can trust (issue 27): the seam between a primary and its standbys, tried as an
attacker and as an operator on a bad day, with real processes on loopback. One test per case
of the issue: an anonymous line fences nobody; a fake standby cannot stand in for a
synchronous one; a standby whose disk fills says so and heals; a fenced primary lets go of its
clients at once and a silent network is noticed; catch-up checks what it receives before it
writes it; ids never come back after a failover; a restarted former primary checks before it
acknowledges, and a promoted server stays primary."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path

import stalkd
from stalkd.replication import wire
from support import ServerProcess, small_tmpfs

from .cluster import (
    Relay,
    admin_port,
    caught_up,
    primary,
    promote_by_signal,
    read_line,
    snapshot,
    standby,
    stats,
    until,
)


def _handshake(address: str, request: bytes, auth: bytes | None = b"auth 00\r\n") -> list[bytes]:
    """What a peer without the secret gets for ``request`` (and a made-up answer to a challenge)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        first = read_line(sock)
        if not first.startswith(b"CHALLENGE") or auth is None:
            return [first]
        sock.sendall(auth)
        return [first, read_line(sock)]


def _http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _metric(port: int, name: str) -> float:
    _, text = _http(port, "/metrics")
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in /metrics:\n{text[:2000]}")


def test_1_an_anonymous_replicate_line_moves_no_primary(tmp_path: Path) -> None:
    p = primary(tmp_path / "p", "--admin", "127.0.0.1:0")
    try:
        adm = admin_port(p)
        # The line of the reproduction, and one with a made-up history: a challenge, then no.
        assert _handshake(p.address, b"replicate 0 4242\r\n")[-1] == b"PERMISSION_DENIED\r\n"
        assert _handshake(p.address, b"replicate 0 4242 4242:0\r\n")[-1] == b"PERMISSION_DENIED\r\n"
        with stalkd.Client(p.address) as c:
            assert c.put(b"still primary") > 0
        st = stats(p)
        assert (st["role"], st["epoch"]) == ("primary", 0)
        assert _metric(adm, "stalkd_replication_refused_total") == 2
        assert "refused replication to" in p.log_text()
        p.stop()
        p = primary(tmp_path / "p")  # nothing of it was kept either
        with stalkd.Client(p.address) as c:
            assert c.put(b"after a restart") > 0
        assert stats(p)["role"] == "primary"
    finally:
        p.stop()


def test_2_a_fake_standby_cannot_stand_in_for_a_synchronous_one(tmp_path: Path) -> None:
    p = primary(tmp_path / "p", "--sync-standbys", "1", "--admin", "127.0.0.1:0")
    s = None
    replies: list[int] = []
    try:
        adm = admin_port(p)
        # A client that speaks the handshake and would acknowledge everything, without a secret.
        assert _handshake(p.address, b"replicate 0 0 -\r\n")[-1] == b"PERMISSION_DENIED\r\n"
        def put() -> None:
            with stalkd.Client(p.address) as c:
                replies.append(c.put(b"held"))

        t = threading.Thread(target=put)
        t.start()
        # The put waits, and the primary says it waits, why, and in /metrics.
        until(lambda: "waiting for standbys" in _http(adm, "/readyz")[1], "/readyz to say it waits", logs=(p,))
        assert _http(adm, "/readyz")[0] == 503 and not replies
        assert _metric(adm, "stalkd_sync_waiting") == 1
        until(lambda: "waiting for standbys" in p.log_text(), "the log to say it waits", logs=(p,))
        assert stats(p)["standbys"] == 0
        s = standby(tmp_path / "s", p)  # a real one, with the secret: the put goes through
        t.join(timeout=60)
        assert replies and replies[0] > 0
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        until(lambda: _http(adm, "/readyz")[0] == 200, "/readyz to be ready again", logs=(p,))
    finally:
        if s is not None:
            s.stop()
        p.stop()


def _fill(mnt: Path, leave: int) -> Path:
    """A file taking all of ``mnt``'s free space but ``leave`` bytes."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        f.truncate(0)
        chunk = b"\0" * (1 << 20)
        left = max(0, free - leave)
        while left > 0:
            f.write(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))
    return filler


def test_3_a_standby_whose_disk_fills_says_so_and_heals(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path, "8m") as mnt:
        p = primary(tmp_path / "p")
        s = standby(mnt / "s", p, "--admin", "127.0.0.1:0")
        try:
            adm = admin_port(s)
            with stalkd.Client(p.address) as c:
                c.put(b"first")
            until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
            filler = _fill(mnt, 64 * 1024)
            body = b"x" * 1000
            with stalkd.Client(p.address) as c:
                ids = [c.put(body) for _ in range(1500)]
            # It cannot keep up, and says so: lag true in stats, /readyz 503 with the reason.
            # (a write refused while streaming, or a resync refused for space when the primary
            # had compacted past it meanwhile: either way the reason names the full disk)
            def says_disk_full() -> bool:
                code, text = _http(adm, "/readyz")
                return code == 503 and ("cannot write" in text or "No space left" in text)

            until(says_disk_full, "the standby to say it cannot write", logs=(s,))
            st = stats(s)
            assert st["in-sync"] is False and st["primary-lag"] > 0, st
            assert _metric(adm, "stalkd_standby_in_sync") == 0
            assert s.proc.poll() is None
            filler.unlink()  # the cause clears: it resumes by itself
            until(lambda: caught_up(p, s), "the standby to resume and catch up", timeout=60, logs=(p, s))
            until(lambda: _http(adm, "/readyz")[0] == 200, "/readyz to be ready again", logs=(s,))
            assert stats(s)["in-sync"] is True
            with stalkd.Client(s.address) as c:
                assert c.peek(ids[-1]).body == body and c.peek(ids[0]).body == body
            assert "in sync again" in s.log_text()
        finally:
            s.stop()
            p.stop()


class LyingRelay(Relay):
    """A relay to a primary that, for its first connections, answers a stream request with a
    bad stream after the ``STREAMING`` line (one of ``lies``, in turn), then relays honestly."""

    def __init__(self, target: ServerProcess, lies: list[bytes]) -> None:
        self.lies = list(lies)
        super().__init__(target)

    def _relay(self, down: socket.socket, up: socket.socket) -> None:
        threading.Thread(target=self._lie, args=(down, up), daemon=True).start()

    def _lie(self, down: socket.socket, up: socket.socket) -> None:
        threading.Thread(target=self._pump, args=(down, up), daemon=True).start()
        with contextlib.suppress(OSError):
            buf = b""
            while True:  # the primary's lines, up to its answer to the request
                data = up.recv(1 << 16)
                if not data:
                    return
                buf += data
                if any(w in buf for w in (b"STREAMING", b"SNAPSHOT", b"NOT_PRIMARY", b"DENIED")):
                    break
                down.sendall(buf)
                buf = b""
            if b"STREAMING" in buf and self.lies:
                lie = self.lies.pop(0)
                down.sendall(buf[:buf.index(b"\r\n", buf.index(b"STREAMING")) + 2] + lie)
                for sock in (down, up):  # and hang up
                    sock.shutdown(socket.SHUT_RDWR)
                return
            down.sendall(buf)
        self._pump(up, down)


def test_5_catch_up_checks_what_it_receives_before_it_writes_it(tmp_path: Path) -> None:
    garbage = b"".join(wire.encode_records(0, [b"\x01" + bytes(range(7, 47)), b"\x01" * 60]))  # CRC right
    damaged = bytearray(b"".join(wire.encode_records(0, [b"\x01" * 40])))
    damaged[-1] ^= 0xFF  # CRC wrong
    huge = wire._MSG.pack(ord("R"), 2**32 - 1, 0) + b"\0" * 64  # claims 4 GiB
    p = primary(tmp_path / "p")
    with stalkd.Client(p.address) as c:
        ids = [c.put(b"job %d" % i) for i in range(50)]
    relay = LyingRelay(p, [garbage, bytes(damaged), huge, garbage])
    s = standby(tmp_path / "s", p, via=relay.address)
    try:
        until(lambda: caught_up(p, s), "the standby to catch up past the lies", logs=(p, s))
        assert not relay.lies, "every lie was told"
        text = s.log_text()
        assert "CRC" in text and "bad message" in text and "corrupt" in text, text
        with stalkd.Client(s.address) as c:
            assert [c.peek(i).body for i in ids] == [b"job %d" % i for i in range(50)]
        s.stop()
        s = standby(tmp_path / "s", p, via=relay.address)  # no repair needed: nothing bad was written
        until(lambda: caught_up(p, s), "the restarted standby to follow", logs=(p, s))
        assert "repair" not in s.log_text()
    finally:
        s.stop()
        relay.close()
        p.stop()


def _raw(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def test_4_a_fenced_primary_lets_go_of_its_clients_at_once(tmp_path: Path) -> None:
    p = primary(tmp_path / "p", "--sync-standbys", "1", "--admin", "127.0.0.1:0")
    relay = Relay(p)
    s = standby(tmp_path / "s", p, via=relay.address)
    held = None
    try:
        adm = admin_port(p)
        with stalkd.Client(p.address) as c:
            last = c.put(b"acknowledged")
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        relay.cut()
        until(lambda: stats(p)["standbys"] == 0, "the primary to lose its standby", logs=(p,))
        # A pipelined connection: a put the primary holds, then a peek of that very job.
        held = _raw(p.address)
        held.sendall(b"put 0 0 60 4\r\nheld\r\npeek %d\r\n" % (last + 1))
        until(lambda: int(stats(p)["binlog-records-written"]) > 0 and stats(p)["current-jobs-ready"] == 2,
              "the held put to be applied", logs=(p,))
        promote_by_signal(s)
        relay.heal()  # the new primary's fence reaches the old one
        # The held put is in the old primary's log and could have reached the new one: neither
        # INSERTED nor NOT_PRIMARY ("nothing applied: send it again") would be true. The
        # connection is cut at once, unanswered: an unknown outcome, and no silence.
        assert read_line(held) == b""
        with _raw(p.address) as other:  # a new peek of the held job, and a new put
            other.sendall(b"peek %d\r\nput 0 0 60 1\r\nx\r\n" % (last + 1))
            assert read_line(other) in (b"NOT_PRIMARY\r\n", b"NOT_FOUND\r\n")
            assert read_line(other) == b"NOT_PRIMARY\r\n"
        st = stats(p)
        assert (st["role"], st["fenced-by-epoch"]) == ("fenced", 1)
        code, text = _http(adm, "/readyz")
        assert code == 503 and "fenced" in text
        assert _metric(adm, "stalkd_fenced") == 1
        assert "fenced: a peer proved epoch 1" in p.log_text()
    finally:
        if held is not None:
            held.close()
        relay.close()
        s.stop()
        p.stop()


def test_4_a_silent_network_is_noticed_by_heartbeats(tmp_path: Path) -> None:

    p = primary(tmp_path / "p")
    relay = Relay(p)
    s = standby(tmp_path / "s", p, via=relay.address)
    try:
        with stalkd.Client(p.address) as c:
            c.put(b"one")
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        relay.silence()  # no reset, no FIN: TCP alone would wait for ever on an idle stream
        until(lambda: stats(p).get("standbys", 0) == 0, "the primary to drop its silent standby", logs=(p, s))
        until(lambda: stats(s)["in-sync"] is False, "the standby to say it is not in sync", logs=(p, s))
        until(lambda: "nothing heard" in p.log_text() and "nothing heard" in s.log_text(),
              "both sides to say why", logs=(p, s))
        relay.heal()
        with stalkd.Client(p.address) as c:
            c.put(b"two")
        until(lambda: caught_up(p, s), "the standby to reconnect and catch up", logs=(p, s))
    finally:
        relay.close()
        s.stop()
        p.stop()


def test_7_a_restarted_former_primary_checks_before_it_acknowledges(tmp_path: Path) -> None:
    p = primary(tmp_path / "p")  # --sync-standbys 0
    relay = Relay(p)  # the primary's address: the same after its restart
    s = standby(tmp_path / "s", p, via=relay.address)
    old = None
    try:
        with stalkd.Client(p.address) as c:
            kept = c.put(b"replicated")
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        p.kill9()
        promote_by_signal(s)
        p = primary(tmp_path / "p")  # restarted by hand, as it was first started
        relay.target = (p.host, p.port)
        replies = []
        with _raw(p.address) as c:  # writes at once: none may be acknowledged
            for i in range(20):
                c.sendall(b"put 0 0 60 2\r\nw%d\r\n" % (i % 10))
            replies = [read_line(c) for _ in range(20)]
        assert set(replies) == {b"NOT_PRIMARY\r\n"}, replies
        assert "not acknowledging writes yet" in p.log_text()
        assert stats(p)["role"] == "fenced"
        p.stop()
        # ... and rejoined as a standby of the new primary, nothing of those writes is anywhere.
        old = standby(tmp_path / "p", s)
        until(lambda: caught_up(s, old), "the former primary to follow", logs=(s, old))
        assert [j[3] for j in snapshot(s, kept + 30).values()] == [b"replicated"]
        # The promoted server, restarted with its first command line, stays primary.
        s.stop()
        s = standby(tmp_path / "s", p, via=relay.address)
        st = stats(s)
        assert (st["role"], st["epoch"]) == ("primary", 1)
        assert "--standby-of" in s.log_text() and "overridden" in s.log_text()
        with stalkd.Client(s.address) as c:
            assert c.put(b"after restart") > kept
    finally:
        if old is not None:
            old.stop()
        relay.close()
        s.stop()
        p.stop()


def test_6_ids_never_come_back_after_a_failover(tmp_path: Path) -> None:
    p = primary(tmp_path / "p")  # --sync-standbys 0: the standby may miss the last puts
    relay = Relay(p)
    s = standby(tmp_path / "s", p, via=relay.address)
    try:
        with stalkd.Client(p.address) as c:
            for i in range(100):
                c.put(b"%d" % i)
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        relay.cut()
        with stalkd.Client(p.address) as c:  # acknowledged, never replicated
            lost = {c.put(b"lost %d" % i) for i in range(5)}
        p.kill9()
        promote_by_signal(s)
        with stalkd.Client(s.address) as c:
            new = [c.put(b"new %d" % i) for i in range(5)]
        assert not lost & set(new), (lost, new)
        assert max(lost) < min(new) < 2**53 and new == list(range(new[0], new[0] + 5))
    finally:
        relay.close()
        s.stop()
        p.stop()


def test_3_with_more_standbys_than_sync_standbys_any_of_them_suffice(tmp_path: Path) -> None:
    p = primary(tmp_path / "p", "--sync-standbys", "1")
    s1 = standby(tmp_path / "s1", p)
    s2 = standby(tmp_path / "s2", p)
    try:
        until(lambda: stats(p).get("standbys") == 2, "both standbys to follow", logs=(p, s1, s2))
        s1.kill9()  # one of two gone: the other holds every write, which is enough
        with stalkd.Client(p.address) as c:
            jid = c.put(b"one is enough")
        with stalkd.Client(s2.address) as c:
            assert c.peek(jid).body == b"one is enough"
    finally:
        for s in (s1, s2):
            s.stop()
        p.stop()
