"""Sans-I/O beanstalkd parser: bytes in, commands / error replies / ``NEED_DATA`` out.

Ensures:
- The items produced depend only on the byte stream, never on how it was split into ``feed``
  calls (the hypothesis properties in tests/protocol check this).
- ``next()`` never raises on any input; protocol errors are values (``Reply("BAD_FORMAT")``).
- Line framing is beanstalkd's, byte for byte: a command line is looked for in a window of 224
  bytes starting where the command starts; the line ends at the *first* ``\\r`` of the window
  when a ``\\n`` follows it. A window with no such line end (too long, or a bare ``\\r`` before
  the real end) is thrown away whole, then input is dropped up to the next ``\\r\\n`` found the
  same way (224-byte windows again), and a single ``BAD_FORMAT`` is produced.
- Memory is bounded before buffering: a line never holds more than 224 bytes of decision
  state; a ``put`` body is only buffered when ``<bytes>`` <= ``max_job_size``; a too-big body
  is counted down and dropped as it arrives (``feed`` discards it without storing it).
- A body of ``BIG_BODY`` bytes or more that has not all arrived is written, read by read,
  into the body's own ``bytes``, made at its full size before any of it came (untouched
  pages: the kernel maps them as they are written). It becomes the item's body without a
  copy: here through a ``BytesIO`` over that ``bytes``, whose ``getvalue`` hands the buffer
  over; the C twin fills the object itself. So no ``next`` copies a big body, nor faults in
  all of its pages at once (a loop turn of the server).

Example:
    >>> p = Parser()
    >>> p.feed(b"use jobs\\r\\nput 0 0 60 2\\r\\nhi\\r\\nres")
    >>> p.next(), p.next(), p.next() is NEED_DATA
    (Use(tube='jobs'), Put(pri=0, delay=0, ttr=60, body=b'hi', error=None), True)
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from stalkd.protocol import lines
from stalkd.protocol.commands import Command, Put
from stalkd.protocol.constructors import put_maker
from stalkd.protocol.grammar import (
    COMMANDS,
    DEFAULT_MAX_JOB_SIZE,
    LINE_MAX,
    MAX_JOB_SIZE_LIMIT,
    U32_MAX,
    U64_MAX,
    CommandSpec,
)
from stalkd.protocol.lines import (
    BODY_SPEC,
    DIGITS,
    EXACT,
    FAST1,
    FAST_DIGITS,
    PUT_HEAD,
    PUT_PARTS,
    PUT_PREFIX,
    fast_digits,
    parse_line,
)
from stalkd.protocol.markers import BAD_FORMAT, NEED_DATA, UNKNOWN_COMMAND, Item, NeedData

__all__ = ["Parser", "NEED_DATA", "NeedData", "Item", "BAD_FORMAT", "UNKNOWN_COMMAND"]


# The framing states; the C parser (_speedups.c) numbers them the same (its ``_state``).
_STATE_LINE, _STATE_ENDLINE, _STATE_BODY, _STATE_SKIP = 0, 1, 2, 3

BIG_BODY: Final = 1 << 20
"""Bodies of at least this many bytes are received apart (the C parser's ``BIG_BODY``)."""

_make_put = put_maker()

# The other body commands (stalkd's result-put): "<prefix><digits>... <bytes>", arguments in
# range and nothing after them, else BAD_FORMAT; their body is read like put's. The regex of
# each is compiled when its first line comes (_OTHER_RX), not at import.
_OTHER_BODY: tuple[tuple[bytes, CommandSpec, tuple[int, ...]], ...] = tuple(
    (s.prefix, s, tuple(U64_MAX if a.kind == "u64" else U32_MAX for a in s.args))
    for s in COMMANDS if s.body and s is not BODY_SPEC
)
_OTHER_RX: dict[str, re.Pattern[bytes]] = {}
if TYPE_CHECKING:
    _BodyDone = Callable[[bytes, str | None], Command]


class Parser:
    """Feed bytes, pull items: a ``Command``, an error ``Reply``, or ``NEED_DATA``.

    ``max_job_size`` is the largest accepted body (beanstalkd ``-z``, at most 1 GiB).
    A ``put`` whose body cannot be accepted still comes out as a ``Put`` carrying
    ``error="JOB_TOO_BIG"`` or ``"EXPECTED_CRLF"`` (its body empty), after exactly
    ``<bytes>+2`` bytes were consumed, so the engine counts it as beanstalkd does.

    >>> p = Parser(max_job_size=10)
    >>> p.feed(b"put 0 0 0 11\\r\\n")
    >>> p.next() is NEED_DATA  # the 13 bytes still to skip are dropped as they arrive
    True
    >>> p.feed(b"delete 9999\\r\\nPEEK 1\\r\\n")
    >>> p.next().error, p.next()
    ('JOB_TOO_BIG', Reply(word='UNKNOWN_COMMAND', args=()))
    """

    __slots__ = (
        "_max_job_size", "_buf", "_pos", "_pending", "_pending_len", "_need", "_state",
        "_skip", "_put", "_other", "_big", "_big_len",
    )  # fmt: skip

    def __init__(self, max_job_size: int = DEFAULT_MAX_JOB_SIZE) -> None:
        self._max_job_size = 0
        self.max_job_size = max_job_size
        self._buf = b""
        self._pos = 0
        # Chunks not yet joined to _buf: joining waits until they can complete an item, so a
        # large body arriving in many small reads is copied once, not once per read.
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._need = 1
        self._state = _STATE_LINE
        self._skip = 0
        self._put: tuple[int, int, int, int] = (0, 0, 0, 0)
        self._other: _BodyDone | None = None  # builds the body command that is not a put
        self._big: io.BytesIO | None = None  # a big body being received, over its own bytes
        self._big_len = 0

    @property
    def max_job_size(self) -> int:
        """Largest accepted ``put`` body in bytes."""
        return self._max_job_size

    @max_job_size.setter
    def max_job_size(self, value: int) -> None:
        if not 0 <= value <= MAX_JOB_SIZE_LIMIT:
            raise ValueError(f"max_job_size must be 0..{MAX_JOB_SIZE_LIMIT}, got {value}")
        self._max_job_size = value

    @property
    def buffered(self) -> int:
        """Bytes held and not yet turned into items (a server's per-connection limit)."""
        return len(self._buf) - self._pos + self._pending_len + self._big_len

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer. Bytes of a too-big body are dropped here."""
        n = len(data)
        if not n:
            return
        if self._skip:
            if n <= self._skip:
                self._skip -= n
                return
            data = data[self._skip :]
            self._skip = 0
        big = self._big
        if big is not None and self._big_len < self._put[3]:
            k = self._put[3] - self._big_len
            if n <= k:
                big.write(data)
                self._big_len += n
                return
            big.write(data[:k])
            self._big_len += k
            data = data[k:]
        self._pending.append(data if type(data) is bytes else bytes(data))
        self._pending_len += len(data)

    def next(self) -> Item:
        """The next item, or ``NEED_DATA`` when the bytes fed so far do not complete one."""
        if self._pending:
            if len(self._buf) - self._pos + self._pending_len < self._need:
                return NEED_DATA
            self._join()
        state = self._state
        if state == _STATE_LINE:
            buf = self._buf
            pos = self._pos
            end = len(buf)
            lim = pos + LINE_MAX
            if lim > end:
                lim = end
            i = buf.find(b"\r", pos, lim - 1)
            if i >= 0 and buf[i + 1] == 10:
                self._pos = i + 2
                line = buf[pos:i]
                # Fast paths for canonical lines (single spaces, plain digits, known names).
                # They need no NUL check: a NUL never passes isdigit, a name check or an
                # exact match. Anything they decline goes through _command's full rules.
                parts = line.split(b" ")
                n = len(parts)
                if n == 2:
                    fast = FAST1.get(parts[0])
                    if fast is not None:
                        cmd = fast(parts[1])
                        if cmd is not None:
                            return cmd
                elif n == 1:
                    only = EXACT.get(line)
                    if only is not None:
                        return only
                elif n == PUT_PARTS:
                    head, a, b, c, d = parts
                    if head == PUT_HEAD and a.isdigit() and b.isdigit() and c.isdigit() and d.isdigit():
                        # Short digit strings (<= 9 digits: within u32) whose body is already
                        # buffered: the common pipelined put, handled here; the rest as before.
                        size = int(d)
                        end = self._pos + size
                        if (len(a) < 10 and len(b) < 10 and len(c) < 10 and len(d) < 10
                                and size <= self._max_job_size and len(buf) >= end + 2
                                and buf[end] == 13 and buf[end + 1] == 10):  # fmt: skip
                            start = self._pos
                            self._pos = end + 2
                            ttr = int(c)
                            return _make_put(int(a), int(b), ttr if ttr else 1, buf[start:end])
                        return self._put_values(int(a), int(b), int(c), size, True)
                else:
                    spec = FAST_DIGITS.get((parts[0], n))
                    if spec is not None:
                        cmd = fast_digits(spec, parts)
                        if cmd is not None:
                            return cmd
                return self._command(line)
            if end - pos >= LINE_MAX:
                self._pos = pos + LINE_MAX
                self._state = _STATE_ENDLINE
                return self._endline()
            self._need = end - pos + 1 if i < 0 else LINE_MAX
            return NEED_DATA
        if state == _STATE_BODY:
            return self._body()
        if state == _STATE_ENDLINE:
            return self._endline()
        return self._skip_done()

    # --- states ---------------------------------------------------------------------------

    def _join(self) -> None:
        rest = self._buf[self._pos :]
        self._buf = b"".join([rest, *self._pending]) if rest else b"".join(self._pending)
        self._pos = 0
        self._pending = []
        self._pending_len = 0
        self._need = 1

    def _endline(self) -> Item:
        """Drop input up to the next line end (found as for a command), then BAD_FORMAT."""
        buf = self._buf
        pos = self._pos
        end = len(buf)
        while True:
            lim = min(pos + LINE_MAX, end)
            i = buf.find(b"\r", pos, lim - 1)
            if i >= 0 and buf[i + 1] == 10:
                self._pos = i + 2
                self._state = _STATE_LINE
                return BAD_FORMAT
            if end - pos < LINE_MAX:
                break
            pos += LINE_MAX
        # Keep only the undecided window: earlier bytes are already thrown away.
        self._buf = buf[pos:]
        self._pos = 0
        self._need = end - pos + 1 if i < 0 else LINE_MAX
        return NEED_DATA

    def _body(self) -> Item:
        pri, delay, ttr, size = self._put
        pos = self._pos
        need = size + 2
        buf = self._buf
        if self._big is not None:
            return self._big_done()
        if len(buf) - pos < size and size >= BIG_BODY:
            # Not all here: the rest is written into the body as it comes (feed). bytes(n) is
            # calloc'd, so its pages stay unmapped until written; the BytesIO owns the only
            # reference, so it writes in place and getvalue() returns that very object.
            self._big = big = io.BytesIO(bytes(size))
            big.write(memoryview(buf)[pos:])
            self._big_len = len(buf) - pos
            self._buf = b""
            self._pos = 0
            self._need = 2  # the CRLF after the body, in the stream again
            return NEED_DATA
        if len(buf) - pos < need:
            self._need = need
            return NEED_DATA
        self._pos = pos + need
        self._state = _STATE_LINE
        other = self._other
        if other is not None:
            self._other = None
            if not buf.startswith(b"\r\n", pos + size):
                return other(b"", "EXPECTED_CRLF")
            return other(buf[pos : pos + size], None)
        if not buf.startswith(b"\r\n", pos + size):
            return Put(pri, delay, ttr, b"", "EXPECTED_CRLF")
        return Put(pri, delay, ttr, buf[pos : pos + size])

    def _big_done(self) -> Item:
        """The end of a big body: its CRLF, then the item with the body as written."""
        big = self._big
        assert big is not None
        pri, delay, ttr, size = self._put
        pos = self._pos
        if self._big_len < size or len(self._buf) - pos < 2:
            return NEED_DATA
        self._big = None
        self._big_len = 0
        self._pos = pos + 2
        self._state = _STATE_LINE
        other = self._other
        self._other = None
        if not self._buf.startswith(b"\r\n", pos):
            return other(b"", "EXPECTED_CRLF") if other is not None else Put(pri, delay, ttr, b"", "EXPECTED_CRLF")
        body = big.getvalue()  # the buffer itself (it was written to its full size)
        return other(body, None) if other is not None else Put(pri, delay, ttr, body)

    def _skip_done(self) -> Item:
        avail = len(self._buf) - self._pos
        if self._skip > avail:
            self._skip -= avail
            self._buf = b""
            self._pos = 0
            return NEED_DATA
        self._pos += self._skip
        self._skip = 0
        self._state = _STATE_LINE
        other = self._other
        if other is not None:
            self._other = None
            return other(b"", "JOB_TOO_BIG")
        pri, delay, ttr, _ = self._put
        return Put(pri, delay, ttr, b"", "JOB_TOO_BIG")

    # --- one command line ------------------------------------------------------------------

    def _command(self, line: bytes) -> Item:
        if line.startswith(PUT_PREFIX) and b"\0" not in line:
            return self._put_line(line[len(PUT_PREFIX) :])
        for prefix, spec, maxima in _OTHER_BODY:
            if line.startswith(prefix) and b"\0" not in line:
                return self._other_line(spec, maxima, line[len(prefix) :])
        return parse_line(line)

    def _other_line(self, spec: CommandSpec, maxima: tuple[int, ...], rest: bytes) -> Item:
        rx = _OTHER_RX.get(spec.name)
        if rx is None:
            rx = _OTHER_RX[spec.name] = re.compile(DIGITS * len(spec.args))
        m = rx.match(rest)
        if m is None or m.end() != len(rest):
            return BAD_FORMAT
        values = [int(g) for g in m.groups()]
        if any(v > top for v, top in zip(values, maxima, strict=True)):
            return BAD_FORMAT
        *head, size = values
        build = spec.build

        def done(body: bytes, error: str | None) -> Command:
            return build(*head, body, error)

        self._other = done
        self._put = (0, 0, 0, size)
        if size > self._max_job_size:
            self._skip = size + 2
            self._state = _STATE_SKIP
            return self._skip_done()
        self._state = _STATE_BODY
        return self._body()

    def _put_line(self, rest: bytes) -> Item:
        # beanstalkd's order: numbers, (count cmd-put), JOB_TOO_BIG, trailing text, ttr clamp.
        m = lines.PUT_RX.match(rest)
        if m is None:
            return BAD_FORMAT
        a, b, c, d = m.groups()
        return self._put_values(int(a), int(b), int(c), int(d), m.end() == len(rest))

    def _put_values(self, pri: int, delay: int, ttr: int, size: int, clean_end: bool) -> Item:
        if pri > U32_MAX or delay > U32_MAX or ttr > U32_MAX or size > U32_MAX:
            return BAD_FORMAT
        if size > self._max_job_size:
            self._put = (pri, delay, ttr, size)
            self._skip = size + 2
            self._state = _STATE_SKIP
            return self._skip_done()
        if not clean_end:
            # Counted as a put, then refused; the body is not skipped (its line comes next).
            return Put(pri, delay, ttr, b"", "BAD_FORMAT")
        if ttr < 1:
            ttr = 1
        # The body is usually already here (pipelined with its line): take it at once.
        buf = self._buf
        pos = self._pos
        end = pos + size
        if len(buf) >= end + 2:
            self._pos = end + 2
            if buf.startswith(b"\r\n", end):
                return _make_put(pri, delay, ttr, buf[pos:end])
            return Put(pri, delay, ttr, b"", "EXPECTED_CRLF")
        self._put = (pri, delay, ttr, size)
        self._state = _STATE_BODY
        return self._body()
