"""A slow, literal model of beanstalkd 1.13's input handling, used as a test oracle.

It transcribes ``conn_process_io``/``h_conn``/``fill_extra_data``/``_skip`` and ``dispatch_cmd``'s
argument reading from prot.c statement by statement (a 224-byte command buffer filled by reads
of whatever size the socket delivers), independently of ``stalkd.protocol.parser``. The
property tests check the real parser produces the same items for any stream and any chunking.
"""

from __future__ import annotations

from collections.abc import Iterable

from stalkd.protocol.commands import (
    Bury,
    Delete,
    Ignore,
    Kick,
    KickJob,
    ListTubes,
    ListTubesWatched,
    ListTubeUsed,
    PauseTube,
    Peek,
    PeekBuried,
    PeekDelayed,
    PeekReady,
    Put,
    Quit,
    Release,
    Reply,
    Reserve,
    ReserveJob,
    ReserveWithTimeout,
    Stats,
    StatsJob,
    StatsTube,
    Touch,
    Use,
    Watch,
)  # fmt: skip

LINE_BUF_SIZE = 224
BF = Reply("BAD_FORMAT")
NAME_CHARS = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()")
ORDER = [
    b"put ", b"peek ", b"peek-ready", b"peek-delayed", b"peek-buried", b"reserve-with-timeout ",
    b"reserve-job ", b"reserve", b"delete ", b"release ", b"bury ", b"kick ", b"kick-job ",
    b"touch ", b"stats-job ", b"stats-tube ", b"stats", b"use ", b"watch ", b"ignore ",
    b"list-tubes-watched", b"list-tube-used", b"list-tubes", b"quit", b"pause-tube",
]  # fmt: skip


def scan_line_end(s: bytes | bytearray) -> int:
    if len(s) < 2:
        return 0
    i = s.find(b"\r", 0, len(s) - 1)
    if i < 0:
        return 0
    return i + 2 if s[i + 1] == 10 else 0


def read_uint(s: bytes, i: int, maxv: int, need_end: bool) -> tuple[int, int] | None:
    while i < len(s) and s[i] == 32:
        i += 1
    if i >= len(s) or not 48 <= s[i] <= 57:
        return None
    j = i
    while j < len(s) and 48 <= s[j] <= 57:
        j += 1
    v = int(s[i:j])
    if v > 2**64 - 1 or v > maxv:
        return None
    if need_end and j != len(s):
        return None
    return v, j


def strtoul(s: bytes, i: int) -> int | None:
    while i < len(s) and s[i] in b" \t\n\x0b\x0c\r":
        i += 1
    neg = False
    if i < len(s) and s[i] in b"+-":
        neg = s[i] == 45
        i += 1
    j = i
    while j < len(s) and 48 <= s[j] <= 57:
        j += 1
    if j == i:
        return None
    v = int(s[i:j])
    if v > 2**64 - 1:
        return None
    if neg:
        v = (2**64 - v) % 2**64
    return v % 2**32


def valid_tube(name: bytes) -> bool:
    return 0 < len(name) <= 200 and all(c in NAME_CHARS for c in name) and name[0] != 45


class CModel:
    def __init__(self, max_job_size: int) -> None:
        self.limit = max_job_size
        self.out: list[object] = []

    def run(self, chunks: Iterable[bytes]) -> list[object]:
        """Items for a stream arriving as ``chunks`` (each a socket's worth of bytes)."""
        queue = [bytearray(c) for c in chunks if c]
        cmd = bytearray()
        state = "cmd"
        body = bytearray()
        need = 0
        put: tuple[int, int, int] = (0, 0, 0)

        def read(n: int) -> bytes:
            if not queue or n <= 0:
                return b""
            take = bytes(queue[0][:n])
            del queue[0][:n]
            if not queue[0]:
                queue.pop(0)
            return take

        def after_line(cmd_len: int) -> None:
            # h_conn's loop: dispatch, then fill_extra_data hands the rest to body or skip
            nonlocal cmd, state, body, need, put
            line = bytes(cmd[: cmd_len - 2])
            del cmd[:cmd_len]
            r = self.dispatch(line)
            if isinstance(r, tuple):
                kind, pri, delay, ttr, size = r
                put = (pri, delay, ttr)
                need = size + 2
                take = min(len(cmd), need)
                if kind == "body":
                    body = bytearray(cmd[:take])
                    state = "body"
                else:
                    need -= take
                    state = "skip"
                del cmd[:take]
            elif r is not None:
                self.out.append(r)

        while True:
            if state == "cmd":
                # process whatever is buffered before reading (h_conn's while loop)
                n = scan_line_end(cmd)
                if n:
                    after_line(n)
                    continue
                data = read(LINE_BUF_SIZE - len(cmd))
                if not data:
                    break
                cmd += data
                n = scan_line_end(cmd)
                if n:
                    after_line(n)
                elif len(cmd) == LINE_BUF_SIZE:
                    cmd = bytearray()
                    state = "endline"
            elif state == "endline":
                data = read(LINE_BUF_SIZE - len(cmd))
                if not data:
                    break
                cmd += data
                n = scan_line_end(cmd)
                if n:
                    self.out.append(BF)
                    del cmd[:n]
                    state = "cmd"
                elif len(cmd) == LINE_BUF_SIZE:
                    cmd = bytearray()
            elif state == "body":
                if len(body) < need:
                    data = read(need - len(body))
                    if not data:
                        break
                    body += data
                    continue
                pri, delay, ttr = put
                if body[-2:] != b"\r\n":
                    self.out.append(Put(pri, delay, ttr, b"", "EXPECTED_CRLF"))
                else:
                    self.out.append(Put(pri, delay, ttr, bytes(body[:-2])))
                state = "cmd"
            elif state == "skip":
                if need:
                    data = read(min(need, 1024))
                    if not data:
                        break
                    need -= len(data)
                    continue
                pri, delay, ttr = put
                self.out.append(Put(pri, delay, ttr, b"", "JOB_TOO_BIG"))
                state = "cmd"
        return self.out

    def dispatch(self, s: bytes) -> object:  # noqa: C901 - a transcription of dispatch_cmd
        if 0 in s:
            return BF
        op = next((p for p in ORDER if s.startswith(p)), None)
        if op is None:
            return Reply("UNKNOWN_COMMAND")
        rest = s[len(op) :]
        u32, u64 = 2**32 - 1, 2**64 - 1
        if op == b"put ":
            a = read_uint(rest, 0, u32, False)
            b = a and read_uint(rest, a[1], u32, False)
            c = b and read_uint(rest, b[1], u32, False)
            d = c and read_uint(rest, c[1], u32, False)
            if not (a and b and c and d):
                return BF
            if d[0] > self.limit:
                return ("skip", a[0], b[0], c[0], d[0])
            if d[1] != len(rest):  # after op_ct[OP_PUT]++: counted, then refused
                return Put(a[0], b[0], c[0], b"", "BAD_FORMAT")
            return ("body", a[0], b[0], max(c[0], 1), d[0])
        if op in (b"peek-ready", b"peek-delayed", b"peek-buried", b"reserve", b"stats",
                  b"list-tubes-watched", b"list-tube-used", b"list-tubes"):  # fmt: skip
            if rest:
                return BF
            return {b"peek-ready": PeekReady, b"peek-delayed": PeekDelayed,
                    b"peek-buried": PeekBuried, b"reserve": Reserve, b"stats": Stats,
                    b"list-tubes-watched": ListTubesWatched, b"list-tube-used": ListTubeUsed,
                    b"list-tubes": ListTubes}[op]()  # fmt: skip
        if op == b"quit":
            return Quit()
        single = {b"peek ": Peek, b"reserve-job ": ReserveJob, b"delete ": Delete,
                  b"kick-job ": KickJob, b"touch ": Touch, b"stats-job ": StatsJob}  # fmt: skip
        if op in single:
            r = read_uint(rest, 0, u64, True)
            return BF if r is None else single[op](r[0])
        if op == b"reserve-with-timeout ":
            r = read_uint(rest, 0, u32, False)
            if r is None or r[0] > 2**31 - 1:
                return BF
            return ReserveWithTimeout(r[0])
        if op == b"release ":
            a = read_uint(rest, 0, u64, False)
            b = a and read_uint(rest, a[1], u32, False)
            c = b and read_uint(rest, b[1], u32, True)
            return Release(a[0], b[0], c[0]) if a and b and c else BF
        if op == b"bury ":
            a = read_uint(rest, 0, u64, False)
            b = a and read_uint(rest, a[1], u32, True)
            return Bury(a[0], b[0]) if a and b else BF
        if op == b"kick ":
            v = strtoul(rest, 0)
            return BF if v is None else Kick(v)
        if op in (b"use ", b"watch ", b"ignore ", b"stats-tube "):
            if not valid_tube(rest):
                return BF
            cls = {b"use ": Use, b"watch ": Watch, b"ignore ": Ignore, b"stats-tube ": StatsTube}[op]
            return cls(rest.decode())
        assert op == b"pause-tube"
        i = 0
        while i < len(rest) and rest[i] == 32:
            i += 1
        j = i
        while j < len(rest) and rest[j] in NAME_CHARS:
            j += 1
        if j == i:
            return BF
        d = read_uint(rest, j, u32, True)
        if d is None or not valid_tube(rest[i:j]):
            return BF
        return PauseTube(rest[i:j].decode(), d[0])
