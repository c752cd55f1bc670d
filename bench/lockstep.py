"""The lockstep load of bench/counts.py (floor_bench.py --counts): each round sends one command
on every connection, then reads every reply, so a run does the same work whatever the server's
speed (valgrind slows a server 50-100x). The cells' works: put, rd (reserve+delete of jobs
preloaded before the meter starts) and wake (a worker's reserve waits, a producer's put wakes
it, the worker deletes the job)."""

from __future__ import annotations

import socket

BODY = b"x" * 100
PUT = b"put 0 0 120 %d\r\n%s\r\n" % (len(BODY), BODY)


class _Reader:
    """Reply lines (and RESERVED bodies) from a blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def line(self) -> bytes:
        while (i := self.buf.find(b"\r\n")) < 0:
            self._more()
        line, self.buf = self.buf[:i], self.buf[i + 2:]
        return line

    def skip(self, n: int) -> None:
        while len(self.buf) < n:
            self._more()
        self.buf = self.buf[n:]

    def _more(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk


def _expect(line: bytes, prefix: bytes) -> None:
    if not line.startswith(prefix):
        raise RuntimeError(f"expected {prefix.decode()}..., got {line!r}")


def _on_tube(port: int, tube: bytes) -> socket.socket:
    """A connection (no Nagle delay) that uses and watches ``tube`` alone, its replies read."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"use %s\r\nwatch %s\r\nignore default\r\n" % (tube, tube))
    r = _Reader(s)
    for _ in range(3):
        r.line()
    return s


def _delete_reserved(socks: list[socket.socket], readers: list[_Reader]) -> None:
    """Each connection's RESERVED reply read, then its job deleted (one round in lockstep)."""
    ids = []
    for r in readers:
        line = r.line()
        _expect(line, b"RESERVED")
        _, jid, size = line.split()
        r.skip(int(size) + 2)
        ids.append(jid)
    for s, jid in zip(socks, ids, strict=True):
        s.sendall(b"delete %s\r\n" % jid)
    for r in readers:
        _expect(r.line(), b"DELETED")


def preload(port: int, tubes: list[bytes], per_tube: int) -> None:
    for tube in tubes:
        with socket.create_connection(("127.0.0.1", port)) as s:
            r = _Reader(s)
            s.sendall(b"use %s\r\n" % tube)
            r.line()
            for left in range(per_tube, 0, -512):
                n = min(left, 512)
                s.sendall(PUT * n)
                for _ in range(n):
                    _expect(r.line(), b"INSERTED")


def drive(port: int, work: str, tubes: list[bytes], rounds: int) -> None:
    """``rounds`` lockstep rounds, one job per connection (one per tube) each."""
    if work == "wake":
        return _drive_wake(port, tubes, rounds)
    socks = [_on_tube(port, tube) for tube in tubes]
    try:
        readers = [_Reader(s) for s in socks]
        for _ in range(rounds):
            if work == "put":
                for s in socks:
                    s.sendall(PUT)
                for r in readers:
                    _expect(r.line(), b"INSERTED")
                continue
            for s in socks:
                s.sendall(b"reserve-with-timeout 0\r\n")
            _delete_reserved(socks, readers)
    finally:
        for s in socks:
            s.close()


def _drive_wake(port: int, tubes: list[bytes], rounds: int) -> None:
    """Per round and tube: the worker's ``reserve`` goes first and waits, then the producer's
    put, whose job the worker gets; then the worker's delete."""
    workers = [_on_tube(port, tube) for tube in tubes]
    producers = [_on_tube(port, tube) for tube in tubes]
    try:
        wr, pr = [_Reader(s) for s in workers], [_Reader(s) for s in producers]
        for _ in range(rounds):
            for s in workers:
                s.sendall(b"reserve\r\n")
            for s in producers:
                s.sendall(PUT)
            for r in pr:
                _expect(r.line(), b"INSERTED")
            _delete_reserved(workers, wr)
    finally:
        for s in workers + producers:
            s.close()
