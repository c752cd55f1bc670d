"""Reply framing, sans-I/O: feed the bytes a server sent, take out whole replies.

Ensures: a reply comes out only when its line and (for ``RESERVED``/``FOUND``/``OK``) its whole
body and trailing CRLF have arrived; bytes after it stay buffered for the next one. Anything
that is not a beanstalkd reply raises :class:`~stalkd.client.errors.ProtocolError` naming the
bytes, and a line longer than ``MAX_LINE`` without CRLF is refused rather than buffered.
"""

from __future__ import annotations

from typing import NamedTuple

from stalkd.client.errors import ProtocolError

__all__ = ["Response", "ReplyReader", "MAX_LINE", "MAX_BODY"]

# The longest legitimate reply line is `USING <200-byte tube>` or `RESERVED <u64> <u32>`.
MAX_LINE = 512
MAX_BODY = 2**32  # a body length the server can announce (u32); larger means garbage

# Reply words whose line announces a body, and which argument holds its length.
_BODY_LEN_ARG = {"RESERVED": 1, "FOUND": 1, "OK": 0}


class Response(NamedTuple):
    """One reply: its first word, the rest of the line split on spaces, and the body if any.

    >>> Response("INSERTED", ("5",))
    Response(word='INSERTED', args=('5',), body=None)
    """

    word: str
    args: tuple[str, ...] = ()
    body: bytes | None = None


class ReplyReader:
    """Turns a byte stream into :class:`Response` values (``next()`` is ``None`` until one is whole).

    >>> r = ReplyReader()
    >>> r.feed(b"RESERVED 1 2\\r\\nhi\\r")
    >>> r.next() is None
    True
    >>> r.feed(b"\\nDELETED\\r\\n")
    >>> r.next(), r.next()
    (Response(word='RESERVED', args=('1', '2'), body=b'hi'), Response(word='DELETED', args=(), body=None))
    """

    __slots__ = ("_buf", "_pos", "_head")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        # a parsed line waiting for its body: (word, args, body length, body start)
        self._head: tuple[str, tuple[str, ...], int, int] | None = None

    def feed(self, data: bytes) -> None:
        """Append bytes received from the server."""
        if self._pos and self._pos == len(self._buf) and self._head is None:
            self._buf.clear()  # cheap reset once everything was consumed
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as a reply."""
        return len(self._buf) - self._pos

    def next(self) -> Response | None:
        """The next whole reply, or ``None`` if more bytes are needed."""
        if self._head is None:
            end = self._buf.find(b"\r\n", self._pos)
            if end < 0:
                if len(self._buf) - self._pos > MAX_LINE:
                    raise ProtocolError(f"reply line longer than {MAX_LINE} bytes without CRLF: "
                                        f"{bytes(self._buf[self._pos:self._pos + 60])!r}...")
                return None
            line = bytes(self._buf[self._pos:end])
            start = end + 2
            try:
                text = line.decode("ascii")
            except UnicodeDecodeError:
                raise ProtocolError(f"reply line is not ASCII: {line[:60]!r}") from None
            word, *rest = text.split(" ")
            args = tuple(rest)
            where = _BODY_LEN_ARG.get(word)
            if where is None:
                self._pos = start
                self._compact()
                return Response(word, args)
            if len(args) <= where or not args[where].isdigit() or int(args[where]) > MAX_BODY:
                raise ProtocolError(f"reply {line[:60]!r} has no valid body length")
            self._head = (word, args, int(args[where]), start)
        word, args, size, start = self._head
        if len(self._buf) - start < size + 2:
            return None
        if self._buf[start + size:start + size + 2] != b"\r\n":
            raise ProtocolError(f"{word} body of {size} bytes is not followed by CRLF")
        body = bytes(self._buf[start:start + size])
        self._head = None
        self._pos = start + size + 2
        self._compact()
        return Response(word, args, body)

    def _compact(self) -> None:
        # Drop consumed bytes once they dominate the buffer, so memory stays bounded while
        # pipelined replies are read one by one without a copy per reply.
        if self._pos > 65536 and self._pos * 2 > len(self._buf):
            del self._buf[:self._pos]
            self._pos = 0
