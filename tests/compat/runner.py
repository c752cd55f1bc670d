"""Runs protocol transcripts over real sockets against any server on 127.0.0.1.

A transcript is data: a list of steps on named connections (``"a"``, ``"b"``, ...), opened on
first use. Steps send bytes, expect one whole reply (exact bytes, or a regex for replies with
variable parts such as stats), expect silence for a moment, expect the server to close, close
or half-close a connection, signal the server, or poll a command until its reply matches.

Expectations may depend on the server's *dialect* ("1.12" for Debian's beanstalkd, "1.13" for
stalkd and newer beanstalkd): a step can be limited to some dialects, and an expectation can be
a function of the dialect. Waits use socket timeouts and polling with deadlines, never sleeps
standing in for synchronisation.
"""

from __future__ import annotations

import re
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stalkd.pids import pid_alive

Pattern = re.Pattern[bytes]
Reply = bytes | Pattern
ReplySpec = Reply | Callable[[str], Reply]


@dataclass(frozen=True)
class Step:
    """Base of all steps. ``dialects``: run only against these (None: against all)."""

    conn: str
    dialects: frozenset[str] | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class Send(Step):
    data: bytes


@dataclass(frozen=True)
class SendRepeat(Step):
    """Send ``chunk`` ``count`` times (large streams without holding them in memory)."""

    chunk: bytes
    count: int


@dataclass(frozen=True)
class Expect(Step):
    """One whole reply (a line, plus ``<bytes>`` and CRLF for OK/RESERVED/FOUND) arrives."""

    reply: ReplySpec
    timeout: float = 5.0


@dataclass(frozen=True)
class Quiet(Step):
    """Nothing arrives for ``seconds`` (a blocked reserve stays blocked)."""

    seconds: float = 0.3


@dataclass(frozen=True)
class Closed(Step):
    """The server closes the connection (EOF) without sending anything more."""

    timeout: float = 5.0


@dataclass(frozen=True)
class Close(Step):
    pass


@dataclass(frozen=True)
class ShutdownWrite(Step):
    pass


@dataclass(frozen=True)
class Signal(Step):
    signum: int = signal.SIGUSR1


@dataclass(frozen=True)
class Restart(Step):
    """Stop the server (SIGKILL when ``kill``, else SIGTERM) and start it again with the same
    flags and data directory. Every connection is dropped; later steps reconnect."""

    kill: bool = True


@dataclass(frozen=True)
class Poll(Step):
    """Send ``data`` repeatedly until the reply matches ``until`` (at most ``timeout`` s)."""

    data: bytes
    until: ReplySpec
    timeout: float = 5.0


@dataclass(frozen=True)
class Transcript:
    """A named conversation. ``options``: extra server flags (beanstalkd's names, e.g. -z)."""

    name: str
    steps: tuple[Step, ...]
    options: tuple[str, ...] = ()
    why: str = ""
    slow: bool = False  # several seconds against some server: skipped by `make test-fast`


class TranscriptError(AssertionError):
    pass


def _resolve(spec: ReplySpec, dialect: str) -> Reply:
    return spec(dialect) if callable(spec) else spec


def _matches(reply: Reply, got: bytes) -> bool:
    if isinstance(reply, bytes):
        return got == reply
    return reply.fullmatch(got) is not None


class _Conn:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.buf = b""

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise
        except ConnectionResetError:
            data = b""
        self.buf += data
        return bool(data)

    def read_reply(self, timeout: float) -> bytes:
        """One whole reply frame; raises TimeoutError or EOFError."""
        deadline = time.monotonic() + timeout
        while b"\r\n" not in self.buf:
            if not self._fill(deadline):
                raise EOFError(f"connection closed; partial reply {self.buf!r}")
        end = self.buf.index(b"\r\n") + 2
        words = self.buf[: end - 2].split(b" ")
        body = 0
        if words[0] == b"OK" and len(words) == 2 and words[1].isdigit():
            body = int(words[1]) + 2
        elif words[0] in (b"RESERVED", b"FOUND") and len(words) == 3 and words[2].isdigit():
            body = int(words[2]) + 2
        while len(self.buf) < end + body:
            if not self._fill(deadline):
                raise EOFError(f"connection closed inside a reply body: {self.buf!r}")
        reply, self.buf = self.buf[: end + body], self.buf[end + body :]
        return reply

    def close(self) -> None:
        self.sock.close()


RestartFn = Callable[[bool], tuple[str, int, int]]
"""``restart(kill) -> (host, port, pid)`` of the restarted server."""


def run_transcript(t: Transcript, host: str, port: int, dialect: str, pid: int | None = None,
                   restart: RestartFn | None = None) -> None:  # fmt: skip
    """Run every step of ``t`` for ``dialect``; raise TranscriptError naming the failing step."""
    conns: dict[str, _Conn] = {}
    where_now = {"host": host, "port": port}

    def conn(name: str) -> _Conn:
        if name not in conns:
            conns[name] = _Conn(str(where_now["host"]), int(where_now["port"]))
        return conns[name]

    last_sent: dict[str, bytes] = {}
    try:
        for i, step in enumerate(t.steps):
            if step.dialects is not None and dialect not in step.dialects:
                continue
            where = f"transcript {t.name!r} step {i} on conn {step.conn!r} ({type(step).__name__})"
            if isinstance(step, Restart):
                if restart is None:
                    raise TranscriptError(f"{where}: this transcript needs a restartable server")
                for c in conns.values():
                    c.close()
                conns.clear()
                where_now["host"], where_now["port"], pid = restart(step.kill)
                continue
            try:
                _run_step(step, conn, conns, last_sent, dialect, pid)
            except TranscriptError as e:
                raise TranscriptError(f"{where}: {e}") from None
            except (TimeoutError, EOFError, OSError) as e:
                sent = last_sent.get(step.conn, b"")[-200:]
                gone = f"; the server (pid {pid}) has exited" if _exited(pid) else ""
                raise TranscriptError(f"{where}: {type(e).__name__}: {e} (last sent {sent!r}){gone}") from None
    finally:
        for c in conns.values():
            c.close()


def _exited(pid: int | None, within: float = 2.0) -> bool:
    """Whether the server has exited, or does within ``within`` s: a connection it dropped as
    it died fails a moment before its process is gone."""
    if pid is None:
        return False
    deadline = time.monotonic() + within
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # polling a condition with a deadline
    return True


def _run_step(
    step: Step,
    conn: Callable[[str], _Conn],
    conns: dict[str, _Conn],
    last_sent: dict[str, bytes],
    dialect: str,
    pid: int | None,
) -> None:
    if isinstance(step, Send):
        conn(step.conn).sock.sendall(step.data)
        last_sent[step.conn] = step.data
    elif isinstance(step, SendRepeat):
        sock = conn(step.conn).sock
        sock.settimeout(60)
        for _ in range(step.count):
            sock.sendall(step.chunk)
        last_sent[step.conn] = step.chunk[-200:]
    elif isinstance(step, Expect):
        want = _resolve(step.reply, dialect)
        got = conn(step.conn).read_reply(step.timeout)
        if not _matches(want, got):
            shown = want if isinstance(want, bytes) else want.pattern
            raise TranscriptError(
                f"after sending {last_sent.get(step.conn, b'')[-200:]!r}\n  expected {shown!r}\n  got      {got!r}"
            )
    elif isinstance(step, Quiet):
        c = conn(step.conn)
        c.sock.settimeout(step.seconds)
        try:
            data = c.sock.recv(65536)
        except TimeoutError:
            return
        raise TranscriptError(f"expected silence for {step.seconds}s, got {data!r}")
    elif isinstance(step, Closed):
        c = conn(step.conn)
        deadline = time.monotonic() + step.timeout
        while True:
            if not c._fill(deadline):
                break
        if c.buf:
            raise TranscriptError(f"expected the server to close silently, got {c.buf!r}")
    elif isinstance(step, Close):
        conns.pop(step.conn).close()
    elif isinstance(step, ShutdownWrite):
        conn(step.conn).sock.shutdown(socket.SHUT_WR)
    elif isinstance(step, Signal):
        if pid is None:
            raise TranscriptError("this transcript needs the server's pid to signal it")
        import os

        os.kill(pid, step.signum)
    elif isinstance(step, Poll):
        want = _resolve(step.until, dialect)
        c = conn(step.conn)
        deadline = time.monotonic() + step.timeout
        got = b""
        while time.monotonic() < deadline:
            c.sock.sendall(step.data)
            got = c.read_reply(max(0.1, deadline - time.monotonic()))
            if _matches(want, got):
                return
            time.sleep(0.02)  # polling interval of a condition with a deadline, not a sync wait
        shown = want if isinstance(want, bytes) else want.pattern
        raise TranscriptError(f"polled {step.data!r} for {step.timeout}s; want {shown!r}, last {got!r}")
    else:  # pragma: no cover - a new step type without a handler
        raise TranscriptError(f"unknown step {step!r}")


def steps(*items: Step | Sequence[Step]) -> tuple[Step, ...]:
    """Flatten steps and lists of steps into a transcript's tuple."""
    out: list[Step] = []
    for item in items:
        if isinstance(item, Step):
            out.append(item)
        else:
            out.extend(item)
    return tuple(out)
