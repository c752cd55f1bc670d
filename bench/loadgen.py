"""The benches' load generator: raw pipelined sockets, run in child processes.

``generate`` drives its share of a cell's connections (one tube each) until a deadline and
reports (jobs done, its CPU seconds, when the last batch finished) on a queue; ``preload`` fills
tubes for a reserve+delete cell. server_bench.py's ``run_cell`` times a cell with them;
admin_bench.py and the benches that import server_bench load their servers the same way.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import selectors
import socket
import time


class Conn:
    """One pipelined connection's state machine: send a batch, count its replies."""

    def __init__(self, port: int, tube: bytes, body: bytes, depth: int, work: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sync(b"use %s\r\nwatch %s\r\nignore default\r\n" % (tube, tube), 3)
        self.sock.setblocking(False)
        self.depth = depth
        self.work = work
        self.put_batch = b"put 0 0 120 %d\r\n%s\r\n" % (len(body), body) * depth
        self.res_batch = b"reserve-with-timeout 0\r\n" * depth
        self.buf = bytearray()
        self.pending = 0  # replies still expected
        self.phase = ""
        self.ids: list[bytes] = []
        self.done = 0
        self.out = b""
        self.exhausted = False

    def _sync(self, data: bytes, replies: int) -> None:
        self.sock.sendall(data)
        got = b""
        while got.count(b"\r\n") < replies:
            got += self.sock.recv(65536)

    def begin(self) -> None:
        if self.work == "put":
            self.phase, self.out, self.pending = "put", self.put_batch, self.depth
        else:
            self.phase, self.out, self.pending = "res", self.res_batch, self.depth

    def flush(self) -> None:
        while self.out:
            try:
                n = self.sock.send(self.out)
            except BlockingIOError:
                return
            self.out = self.out[n:]

    def readable(self) -> bool:
        """Consume replies; True when the batch is complete."""
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk
        if self.phase in ("put", "del"):
            n = self.buf.count(b"\r\n")
            self.pending -= n
            if n:
                del self.buf[: self.buf.rfind(b"\r\n") + 2]
            if self.pending == 0:
                if self.phase == "put":
                    self.done += self.depth
                else:
                    self.done += len(self.ids)
                return True
            return False
        # reserve phase: RESERVED <id> <bytes>\r\n<body>\r\n or TIMED_OUT\r\n
        buf = self.buf
        pos = 0
        while self.pending:
            i = buf.find(b"\r\n", pos)
            if i < 0:
                break
            line = bytes(buf[pos:i])
            if line.startswith(b"RESERVED"):
                _, jid, size = line.split()
                end = i + 2 + int(size) + 2
                if end > len(buf):
                    break
                self.ids.append(jid)
                pos = end
            else:
                pos = i + 2
            self.pending -= 1
        del buf[:pos]
        if self.pending:
            return False
        if not self.ids:
            self.exhausted = True  # the preloaded jobs are used up: this connection is done
            return True
        self.phase = "del"
        self.out = b"".join(b"delete %s\r\n" % j for j in self.ids)
        self.pending = len(self.ids)
        return False


def generate(port: int, tubes: list[bytes], body: bytes, depth: int, work: str,
              t_start: float, t_end: float, q: mp.Queue[tuple[int, float, float]]) -> None:
    conns = [Conn(port, t, body, depth, work) for t in tubes]
    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c.sock, selectors.EVENT_READ, c)
    while time.time() < t_start:
        time.sleep(0.001)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    rw = selectors.EVENT_READ | selectors.EVENT_WRITE

    def push(c: Conn) -> None:
        # Write what the socket takes; ask for writability only while something is left.
        c.flush()
        sel.modify(c.sock, rw if c.out else selectors.EVENT_READ, c)

    for c in conns:
        c.begin()
        push(c)
    active = len(conns)
    last = time.time()
    while active:
        for key, mask in sel.select(1.0):
            c = key.data
            if mask & selectors.EVENT_WRITE:
                push(c)
            if not mask & selectors.EVENT_READ:
                continue
            if c.readable():
                last = time.time()
                if last < t_end and not c.exhausted:
                    c.ids = []
                    c.begin()
                    push(c)
                else:
                    active -= 1
                    sel.unregister(c.sock)
            elif c.out:
                push(c)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    q.put((sum(c.done for c in conns), cpu, last))


def preload(port: int, tubes: list[bytes], body: bytes, per_tube: int) -> None:
    """Put ``per_tube`` jobs into each tube (not timed), pipelined in chunks."""
    for t in tubes:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"use %s\r\n" % t)
            left = per_tube
            got = b""
            expect = 1
            while left:
                n = min(left, 512)
                s.sendall(b"put 0 0 120 %d\r\n%s\r\n" % (len(body), body) * n)
                left -= n
                expect += n
            while got.count(b"\r\n") < expect:
                got += s.recv(1 << 20)
