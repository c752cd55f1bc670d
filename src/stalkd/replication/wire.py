"""The replication protocol between a primary and its standbys: written here and nowhere else.

A standby opens an ordinary connection to one of the primary's listeners and sends, as its
first line, an off-protocol command (beanstalkd clients never send it; a TLS listener with an
ACL admits it only for identities with ``replicate = true``)::

    replicate <offset> <epoch>\\r\\n        stream the log from <offset>; I follow <epoch>
    replicate-snapshot\\r\\n                send me your newest snapshot

The primary answers with one line:

    STREAMING <epoch> <next-offset> <history>\\r\\n   then messages follow, below
    SNAPSHOT <start-offset> <bytes> <epoch> <history>\\r\\n<bytes>   a snapshot file, then
                             the connection closes
    SNAPSHOT_NEEDED\\r\\n     <offset> is no longer kept (or there is no snapshot): copy one first
    DIVERGED <offset>\\r\\n   your log past <offset> was never this primary's: cut it there
    NOT_PRIMARY\\r\\n         this server is a standby, or has seen a newer epoch
    PERMISSION_DENIED\\r\\n   the ACL does not let this identity replicate

``<history>`` is the primary's epochs as ``epoch:start-offset`` pairs joined by ``,`` (``-``
for none). After ``STREAMING`` the primary sends messages, each ``u8 kind | u32 length |
body``: kind ``R`` (records) is ``u64 first offset`` then ``u32 length | payload`` per record,
the payloads of consecutive log frames exactly as the primary's log holds them. The standby
sends back, whenever it has made more of the log durable, ``u64 durable end offset`` (every
record below it is fsynced on the standby's disk).

Why payloads and not the frames' bytes: a frame carries the writer epoch of the segment it
sits in (so bytes behind a torn tail never reappear), which is the standby's own; the
standby frames the same payloads at the same offsets.

Ensures: ``RecordDecoder`` and ``AckDecoder`` give back exactly what ``encode_records`` and
``encode_ack`` made, whatever the chunking of the bytes fed to them; a message longer than
``MAX_MESSAGE`` is refused (``WireError``) before it is buffered.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = [
    "REPLICATE", "REPLICATE_SNAPSHOT", "MAX_MESSAGE", "MAX_LINE", "WireError", "Reply",
    "encode_request", "parse_request", "encode_streaming", "encode_snapshot", "parse_reply", "encode_records",
    "RecordDecoder", "encode_ack", "AckDecoder", "format_history", "parse_history",
]  # fmt: skip

REPLICATE = b"replicate"
"""Every replication request starts with this word (the server's listeners look for it)."""
REPLICATE_SNAPSHOT = b"replicate-snapshot\r\n"
MAX_MESSAGE = 64 * 2**20  # a records message; the sender cuts batches far below this
MAX_LINE = 4096
_MSG = struct.Struct("<BI")
_FIRST = struct.Struct("<Q")
_LEN = struct.Struct("<I")
_ACK = struct.Struct("<Q")
_KIND_RECORDS = ord("R")


class WireError(ValueError):
    """The peer sent something this protocol does not allow."""


def encode_request(offset: int, epoch: int) -> bytes:
    """Example:

    >>> encode_request(12, 0)
    b'replicate 12 0\\r\\n'
    """
    return b"replicate %d %d\r\n" % (offset, epoch)


def parse_request(line: bytes) -> tuple[int, int] | None:
    """``(offset, epoch)`` of a stream request, None for a snapshot request; WireError else.

    >>> parse_request(b"replicate 12 3\\r\\n"), parse_request(b"replicate-snapshot\\r\\n")
    ((12, 3), None)
    """
    if line == REPLICATE_SNAPSHOT:
        return None
    parts = line.rstrip(b"\r\n").split(b" ")
    if len(parts) != 3 or parts[0] != REPLICATE or not all(p.isdigit() for p in parts[1:]):
        raise WireError(f"bad replication request {line[:80]!r}")
    return int(parts[1]), int(parts[2])


def format_history(history: Sequence[tuple[int, int]]) -> str:
    """Example:

    >>> format_history([(1, 10), (2, 30)]), format_history([])
    ('1:10,2:30', '-')
    """
    return ",".join(f"{e}:{o}" for e, o in history) or "-"


def parse_history(text: str) -> tuple[tuple[int, int], ...]:
    """Example:

    >>> parse_history("1:10,2:30"), parse_history("-")
    (((1, 10), (2, 30)), ())
    """
    if text == "-":
        return ()
    try:
        pairs = tuple((int(e), int(o)) for e, _, o in (p.partition(":") for p in text.split(",")))
    except ValueError:
        raise WireError(f"bad epoch history {text[:80]!r}") from None
    return pairs


def encode_snapshot(start_offset: int, size: int, epoch: int, history: Sequence[tuple[int, int]]) -> bytes:
    return f"SNAPSHOT {start_offset} {size} {epoch} {format_history(history)}\r\n".encode()


def encode_streaming(epoch: int, next_offset: int, history: Sequence[tuple[int, int]]) -> bytes:
    return f"STREAMING {epoch} {next_offset} {format_history(history)}\r\n".encode()


class Reply:
    """The primary's first line, parsed: ``word`` and its integer/text arguments."""

    __slots__ = ("word", "args")

    def __init__(self, word: str, args: tuple[str, ...]) -> None:
        self.word = word
        self.args = args

    def __repr__(self) -> str:
        return f"Reply({self.word!r}, {self.args!r})"


_ARITY = {"STREAMING": 3, "SNAPSHOT": 4, "SNAPSHOT_NEEDED": 0, "DIVERGED": 1, "NOT_PRIMARY": 0,
          "PERMISSION_DENIED": 0}  # fmt: skip


def parse_reply(line: bytes) -> Reply:
    """Example:

    >>> parse_reply(b"DIVERGED 40\\r\\n")
    Reply('DIVERGED', ('40',))
    """
    parts = line.rstrip(b"\r\n").decode("ascii", "replace").split(" ")
    word, args = parts[0], tuple(parts[1:])
    if _ARITY.get(word) != len(args):
        raise WireError(f"unexpected reply from the primary: {line[:120]!r}")
    return Reply(word, args)


def encode_records(first: int, payloads: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """One records message as parts to write in order (payloads are not copied).

    >>> d = RecordDecoder(); d.feed(b"".join(encode_records(5, [b"a", b"bc"])))
    [(5, [b'a', b'bc'])]
    """
    parts: list[bytes | memoryview] = [b"", _FIRST.pack(first)]
    size = _FIRST.size
    pack = _LEN.pack
    for p in payloads:
        n = len(p)
        parts.append(pack(n))
        parts.append(p)
        size += 4 + n
    parts[0] = _MSG.pack(_KIND_RECORDS, size)
    return parts


class RecordDecoder:
    """Bytes from the primary -> ``(first offset, [payloads])`` per complete message."""

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[tuple[int, list[bytes]]]:
        buf = self._buf
        buf += data
        out: list[tuple[int, list[bytes]]] = []
        pos = 0
        while len(buf) - pos >= _MSG.size:
            kind, size = _MSG.unpack_from(buf, pos)
            if kind != _KIND_RECORDS or size > MAX_MESSAGE or size < _FIRST.size:
                raise WireError(f"bad message from the primary (kind {kind}, {size} bytes)")
            start = pos + _MSG.size
            end = start + size
            if len(buf) < end:
                break
            (first,) = _FIRST.unpack_from(buf, start)
            p = start + _FIRST.size
            payloads = []
            while p < end:
                (n,) = _LEN.unpack_from(buf, p)
                p += 4
                if p + n > end:
                    raise WireError("a record runs past the end of its message")
                payloads.append(bytes(buf[p:p + n]))
                p += n
            out.append((first, payloads))
            pos = end
        if pos:
            del buf[:pos]
        return out


def encode_ack(durable_end: int) -> bytes:
    return _ACK.pack(durable_end)


class AckDecoder:
    """Bytes from a standby -> the latest durable end offset it reported (None: none yet)."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> int | None:
        """Example:

        >>> AckDecoder().feed(encode_ack(3) + encode_ack(9)[:4])
        3
        """
        buf = self._buf + data
        whole = len(buf) - len(buf) % _ACK.size
        self._buf = buf[whole:]
        if not whole:
            return None
        return int(_ACK.unpack_from(buf, whole - _ACK.size)[0])
