"""A minimal blocking beanstalkd wire client for server tests (reads whole replies, bodies included)."""

from __future__ import annotations

import contextlib
import socket
import time


class Wire:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, unix: str | None = None,
                 timeout: float = 10.0) -> None:
        if unix is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix)
        else:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError(f"server closed the connection; unread: {self.buf!r}")
        self.buf += chunk

    def reply(self) -> bytes:
        """One whole reply: the line, plus ``<bytes>`` and CRLF for RESERVED/FOUND/OK."""
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, _ = self.buf.partition(b"\r\n")
        need = len(line) + 2
        word = line.split(b" ", 1)[0]
        if word in (b"RESERVED", b"FOUND", b"OK"):
            need += int(line.rsplit(b" ", 1)[1]) + 2
        while len(self.buf) < need:
            self._fill()
        out, self.buf = self.buf[:need], self.buf[need:]
        return out

    def cmd(self, data: bytes) -> bytes:
        self.send(data)
        return self.reply()

    def closed(self, timeout: float = 5.0) -> bool:
        """True once the server closes the connection (EOF) with nothing more to read."""
        previous = self.sock.gettimeout()
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = self.sock.recv(1 << 16)
                except TimeoutError:
                    continue
                except ConnectionResetError:
                    return True
                if not chunk:
                    return True
                self.buf += chunk
            return False
        finally:
            self.sock.settimeout(previous)

    def quiet(self, seconds: float) -> bool:
        """True when nothing arrives for ``seconds`` (a blocked reserve stays blocked).

        The socket's own timeout is restored afterwards, so a later ``reply()`` waits as long
        as the connection was opened to wait, not ``seconds``."""
        if self.buf:
            return False
        previous = self.sock.gettimeout()
        self.sock.settimeout(seconds)
        try:
            chunk = self.sock.recv(1 << 16)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(previous)
        self.buf += chunk
        return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stats(w: Wire, cmd: bytes = b"stats\r\n") -> dict[str, str]:
    body = w.cmd(cmd).split(b"\r\n", 1)[1]
    out = {}
    for line in body.decode().splitlines()[1:]:
        if ": " in line:
            k, v = line.split(": ", 1)
            out[k] = v.strip('"')
    return out


def flood_unread(port: int, payload: bytes) -> socket.socket:
    """Connect and send ``payload`` without ever reading (as much as the socket takes). A
    small receive buffer keeps the kernel from absorbing the replies for the server."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        s.send(payload)
    return s


def proc_status(pid: int, key: str) -> int:
    """A byte figure of /proc/PID/status (``VmRSS``, ``VmHWM``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/{pid}/status")
