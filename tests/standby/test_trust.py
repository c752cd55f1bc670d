"""Standbys you can trust (issue 27): the seam between a primary and its standbys, tried as an
attacker and as an operator on a bad day, with real processes on loopback. One test per case
of the issue: an anonymous line fences nobody; a fake standby cannot stand in for a
synchronous one; a standby whose disk fills says so and heals; a fenced primary lets go of its
clients at once and a silent network is noticed; catch-up checks what it receives before it
writes it; ids never come back after a failover; a restarted former primary checks before it
acknowledges, and a promoted server stays primary."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path

import stalkd

from .cluster import admin_port, caught_up, primary, standby, stats, until


def _line(sock: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        buf += chunk
    return buf


def _handshake(address: str, request: bytes, auth: bytes | None = b"auth 00\r\n") -> list[bytes]:
    """What a peer without the secret gets for ``request`` (and a made-up answer to a challenge)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        first = _line(sock)
        if not first.startswith(b"CHALLENGE") or auth is None:
            return [first]
        sock.sendall(auth)
        return [first, _line(sock)]


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
        t = threading.Thread(target=lambda: replies.append(stalkd.Client(p.address).put(b"held")))
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
