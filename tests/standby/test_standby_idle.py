"""An idle stream stays up: the standby answers every heartbeat, not only those whose end moved.

An idle primary's heartbeats all carry the same end; a standby that answered only a changed one
went silent after the first, and the primary dropped its stream as silent every
``wire.SILENT_AFTER`` seconds (a reconnection, a warning and a stalled sync reply each time),
found by the fault campaign (campaign/README.md) on a quiet pair. The relay counts the bytes
the standby sends on each connection: an answered heartbeat is an ack, so one connection has to
carry many acks while nothing is written."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import stalkd
from stalkd.replication import wire

from .cluster import Relay, caught_up, primary, standby, stats, until

ACKS = 12  # three times wire.SILENT_AFTER of heartbeats: past it, a silent standby is dropped


class CountingRelay(Relay):
    """Counts what the standby sends up each connection (the last one: ``up[-1]``)."""

    def __init__(self, *args: object, **kw: object) -> None:
        self.up: list[int] = []
        self._count_lock = threading.Lock()
        super().__init__(*args, **kw)  # type: ignore[arg-type]

    def _relay(self, down: socket.socket, up: socket.socket) -> None:
        with self._count_lock:
            self.up.append(0)
            k = len(self.up) - 1
        threading.Thread(target=self._count, args=(down, up, k), daemon=True).start()
        threading.Thread(target=self._pump, args=(up, down), daemon=True).start()

    def _count(self, src: socket.socket, dst: socket.socket, k: int) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                with self._count_lock:
                    self.up[k] += len(data)
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def last(self) -> tuple[int, int]:
        with self._count_lock:
            return len(self.up), self.up[-1] if self.up else 0


def test_an_idle_standby_answers_every_heartbeat_and_keeps_its_stream(tmp_path: Path) -> None:
    p = primary(tmp_path / "p")
    relay = CountingRelay(p)
    s = standby(tmp_path / "s", p, via=relay.address)
    try:
        with stalkd.Client(p.address) as c:
            c.put(b"one")
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        ack = len(wire.encode_ack(0))
        base = relay.last()

        def many_acks_on_one_stream() -> bool:
            nonlocal base
            now = relay.last()
            if now[0] != base[0]:  # dropped and reconnected: count again on the new stream
                base = now
            return now[1] - base[1] >= ACKS * ack

        until(many_acks_on_one_stream, f"{ACKS} heartbeats answered on one idle stream", logs=(p, s))
        assert stats(p)["standbys"] == 1
        assert "nothing heard" not in p.log_text()
    finally:
        relay.close()
        s.stop()
        p.stop()
