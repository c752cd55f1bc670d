"""The replication protocol between a primary and its standbys: written here and nowhere else.

A standby opens an ordinary connection to one of the primary's listeners and sends, as its
first line, an off-protocol command (beanstalkd clients never send it)::

    replicate <offset> <epoch> <history> [<name>]\r\n   stream the log from <offset>; I follow <epoch>
    replicate-snapshot\r\n                      send me your newest snapshot

A standby that takes frames messages (kind ``F``, below) writes ``<epoch>`` with one leading
``0`` (``replicate 40 02 1:10,2:30``): its capability token. A primary sends ``F`` only to a
standby that asked; to any other it sends records messages (``R``) alone, which every build
reads. The token has no field of its own because a primary of an earlier build refuses a
request with a sixth field (``PERMISSION_DENIED``) but reads a leading zero as the same epoch:
standbys and primaries may be upgraded in either order. It is part of the request line, which
the secret's proof (below) covers, so nobody between the two can add or remove it unnoticed.
A standby that also paces its acknowledgements when told it may (below) writes two leading
zeros (``replicate 40 002 1:10,2:30``): every leading zero is one capability more, each implying
the ones before, and a primary of an earlier build reads both zeros as the frames token and the
same epoch.

Only a peer the primary can authenticate may replicate: an identity its ACL grants
``replicate = true`` on a TLS listener, or a holder of the shared secret
(``--replication-secret FILE``). Otherwise the primary first answers

    CHALLENGE <nonce>\r\n   prove you hold the secret

and the standby sends ``auth <proof>\r\n``, ``proof`` being the hex HMAC-SHA256, keyed with
the secret, of the nonce and the request line (``proof``): the secret never crosses the
network, and a recorded proof is worth nothing on another connection. Then the primary answers
with one line:

    STREAMING <epoch> <next-offset> <history> [<ack-delay-ms>]\r\n   then messages follow, below
    SNAPSHOT <start-offset> <bytes> <epoch> <history>\r\n<bytes>   a snapshot file, then
                             the connection closes
    SNAPSHOT_NEEDED\r\n     <offset> is no longer kept (or there is no snapshot): copy one first
    DIVERGED <offset>\r\n   your log past <offset> was never this primary's: cut it there
    NOT_PRIMARY\r\n         this server is a standby, or has seen a newer epoch
    PERMISSION_DENIED\r\n   not authenticated (no ACL grant, no secret, or a wrong proof)

``<history>`` is a log's epochs as ``epoch:start-offset`` pairs joined by ``,`` (``-`` for
none): the request's is the standby's own, so that a claim of a newer epoch can be checked
against it (``epochs.verify_claim``) before it fences anyone. ``<ack-delay-ms>`` is sent only to
a standby that asked with two leading zeros (one that did not would refuse the line): the
longest, in milliseconds, the standby may hold back an acknowledgement (0: acknowledge every
durable end at once, as a primary whose replies wait for standbys needs; without the field, 0
too). After ``STREAMING`` the primary sends messages, each ``u8 kind | u32 length | u32 CRC of
the body | body``:

- kind ``F`` (frames, what a primary sends a standby that asked for them): ``u64 first offset |
  u64 segment base`` then consecutive frames of the primary's log exactly as its writer laid
  them out in the segment based there (``stalkd.log.frame``: each carries its own CRC-32C,
  its length, and its offset as a delta from that base); the message's CRC is the CRC-32C of
  its body. The primary sends what one group commit wrote as one message, copied once out of
  its log, with no work per record; the standby checks every frame (CRC, delta, kind) before
  it takes the payloads.
- kind ``R`` (records: the whole stream of a standby that did not ask for frames, and where a
  frame's position in the log is not known yet) is ``u64 first offset`` then ``u32 length |
  payload`` per record; its CRC is the CRC-32 of the body.
- kind ``H`` (heartbeat, sent every ``HEARTBEAT`` seconds) is ``u64 the primary's log end``,
  with a CRC-32. The standby sends back, whenever
it has made more of the log durable and at every heartbeat, ``u64 durable end offset`` (every
record below it is fsynced on the standby's disk); told an ack delay, it sends the first at once
and the next at most that long after the one before (the durable end as it is then), and at
every heartbeat. Either side that hears nothing for ``SILENT_AFTER`` seconds drops the
connection (the standby then reconnects).

The standby writes payloads, not the primary's frames: a frame carries the writer epoch and
base of the segment it sits in (so bytes behind a torn tail never reappear), which are the
standby's own; the standby frames the same payloads at the same offsets.

Ensures: ``RecordDecoder`` and ``AckDecoder`` give back exactly what ``encode_records``,
``encode_frames`` and ``encode_ack`` made, whatever the chunking of the bytes fed to them; a message longer than
``MAX_MESSAGE`` is refused (``WireError``) before it is buffered, and one whose CRC does not
match its body, or with a frame that fails its own checks, is refused before any of it is
handed on.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = [
    "REPLICATE", "REPLICATE_SNAPSHOT", "MAX_MESSAGE", "MAX_LINE", "WireError", "Reply",
    "encode_request", "parse_request", "encode_streaming", "encode_snapshot", "parse_reply", "encode_records",
    "encode_frames", "encode_span", "RecordDecoder", "encode_ack", "AckDecoder", "format_history", "parse_history", "Request",
    "encode_challenge", "new_nonce", "proof", "encode_auth", "check_auth", "encode_heartbeat",
    "HEARTBEAT", "SILENT_AFTER", "ack_delay",
]  # fmt: skip

REPLICATE = b"replicate"
"""Every replication request starts with this word (the server's listeners look for it)."""
REPLICATE_SNAPSHOT = b"replicate-snapshot\r\n"
MAX_MESSAGE = 64 * 2**20  # a records message; the sender cuts batches far below this
_MAX_MESSAGE_C = MAX_MESSAGE  # (compiled: a C constant, wire.pxd)
MAX_LINE = 4096
HEARTBEAT = 0.25  # seconds between heartbeats on an idle stream (both ways)
SILENT_AFTER = 1.5  # seconds without a byte from the peer after which a stream is dropped
_MSG = struct.Struct("<BII")
_FIRST = struct.Struct("<Q")
_LEN = struct.Struct("<I")
_ACK = struct.Struct("<Q")
_ACK_SIZE = _ACK.size  # (AckDecoder.feed: the fast path reads it with int.from_bytes, "little")
_OFFSET_LIMIT = 1 << 63  # (AckDecoder.take: an offset is a C signed 64-bit integer)
_KIND_RECORDS = ord("R")
_KIND_HEARTBEAT = ord("H")
_KIND_FRAMES = ord("F")
_FRAMES_HEAD = struct.Struct("<QQ")  # first offset, the primary's segment base
_MSG_SIZE = _MSG.size
_FRAMES_AT = _MSG.size + _FRAMES_HEAD.size  # where a frames message's frames start
_FRAMES_PREFIX = bytes(_FRAMES_AT)  # (encode_frames, compiled: the room its frames go behind)
_FRAMES_TOKEN = b"0"  # in front of a request's epoch: the standby takes frames messages
_MAX_EPOCH = 0xFFFF  # a frame's writer epoch field (u16): the primary's, not checked against ours


class WireError(ValueError):
    """The peer sent something this protocol does not allow."""


def encode_request(offset: int, epoch: int, history: Sequence[tuple[int, int]] = (), name: str = "", *,
                   frames: bool = True, paced: bool = False) -> bytes:  # fmt: skip
    """``name``: the standby's node name in an automatic-failover cluster (``--ha``), which the
    primary's sync set names (none without ``--ha``); ``frames``: this standby takes frames
    messages (the epoch's leading ``0``; every reader of this build does); ``paced``: it also
    paces its acknowledgements when the primary says how (a second ``0``: a streaming standby's
    receiver; catch-up and the fence read no acknowledgement delay).

    >>> encode_request(12, 0), encode_request(40, 2, [(1, 10), (2, 30)])
    (b'replicate 12 00 -\\r\\n', b'replicate 40 02 1:10,2:30\\r\\n')
    >>> encode_request(5, 1, [(1, 0)], "node-b", frames=False), encode_request(5, 1, paced=True)
    (b'replicate 5 1 1:0 node-b\\r\\n', b'replicate 5 001 -\\r\\n')
    """
    if paced and not frames:
        raise ValueError("a paced request takes frames too (each leading zero implies the ones before)")
    tail = b" " + name.encode() if name else b""
    return b"replicate %d %s%d %s%s\r\n" % (offset, _FRAMES_TOKEN * (frames + paced), epoch,
                                             format_history(history).encode(), tail)  # fmt: skip


class Request:
    """A stream request: the standby's log end, its epoch and that epoch's history, its name,
    whether it takes frames messages, and whether it paces its acknowledgements when told."""

    __slots__ = ("offset", "epoch", "history", "name", "frames", "paced")

    def __init__(self, offset: int, epoch: int, history: tuple[tuple[int, int], ...], name: str = "",
                 frames: bool = False, paced: bool = False) -> None:  # fmt: skip
        self.offset = offset
        self.epoch = epoch
        self.history = history
        self.name = name
        self.frames = frames
        self.paced = paced

    def __repr__(self) -> str:
        return (f"Request({self.offset}, {self.epoch}, {self.history!r}{f', {self.name!r}' if self.name else ''}"
                f"{', frames=True' if self.frames else ''}{', paced=True' if self.paced else ''})")


def parse_request(line: bytes) -> Request | None:
    """The stream request in ``line``, None for a snapshot request; WireError else (a
    request without a history, from an earlier build, has none; one without the frames token,
    from a build before frames messages, gets records messages alone; one with a single
    leading zero, from a build before paced acknowledgements, is told no delay).

    >>> parse_request(b"replicate 12 3 1:4,3:9\\r\\n"), parse_request(b"replicate-snapshot\\r\\n")
    (Request(12, 3, ((1, 4), (3, 9))), None)
    >>> parse_request(b"replicate 12 03 1:4,3:9 node-b\\r\\n"), parse_request(b"replicate 0 00 -\\r\\n")
    (Request(12, 3, ((1, 4), (3, 9)), 'node-b', frames=True), Request(0, 0, (), frames=True))
    >>> parse_request(b"replicate 0 000 -\\r\\n"), parse_request(b"replicate 7 0012 -\\r\\n")
    (Request(0, 0, (), frames=True, paced=True), Request(7, 12, (), frames=True, paced=True))
    """
    if line == REPLICATE_SNAPSHOT:
        return None
    parts = line.rstrip(b"\r\n").split(b" ")
    if (len(parts) not in (3, 4, 5) or parts[0] != REPLICATE or not all(p.isdigit() for p in parts[1:3])
            or max(len(p) for p in parts[1:3]) > 19):
        raise WireError(f"bad replication request {line[:80]!r}")
    history = parse_history(parts[3].decode("ascii", "replace")) if len(parts) >= 4 else ()
    name = parts[4].decode("ascii", "replace") if len(parts) == 5 else ""
    if name and (len(name) > 64 or not all(ch.isalnum() or ch in "-_." for ch in name)):
        raise WireError(f"bad standby name in {line[:80]!r}")
    epoch = parts[2]
    tokens = len(epoch) - max(1, len(epoch.lstrip(_FRAMES_TOKEN)))  # leading zeros beyond the epoch's own
    return Request(int(parts[1]), int(epoch), history, name, tokens >= 1, tokens >= 2)


def new_nonce() -> bytes:
    return os.urandom(16).hex().encode()


def encode_challenge(nonce: bytes) -> bytes:
    return b"CHALLENGE %s\r\n" % nonce


def proof(secret: str, nonce: bytes, request: bytes) -> bytes:
    """What a holder of ``secret`` answers to ``nonce`` for ``request`` (its line, as sent).

    >>> proof("s" * 16, b"ab", b"replicate 0 0 -\\r\\n") == proof("s" * 16, b"ab", b"replicate 0 0 -\\r\\n")
    True
    """
    # hashlib and hmac (OpenSSL's, ~1.2 ms to import) here alone: a server imports this module
    # at start (its listeners look for REPLICATE) and most never see a replication secret
    import hashlib
    import hmac

    return hmac.new(secret.encode(), nonce + b" " + request, hashlib.sha256).hexdigest().encode()


def encode_auth(secret: str, nonce: bytes, request: bytes) -> bytes:
    return b"auth %s\r\n" % proof(secret, nonce, request)


def check_auth(secret: str | None, nonce: bytes, request: bytes, line: bytes) -> bool:
    """Whether ``line`` proves ``secret`` for this nonce and request (constant time).

    >>> s, n, r = "s" * 16, b"ab", b"replicate 0 0 -\\r\\n"
    >>> check_auth(s, n, r, encode_auth(s, n, r)), check_auth(s, n, r, encode_auth("t" * 16, n, r))
    (True, False)
    >>> check_auth(None, n, r, encode_auth(s, n, r))
    False
    """
    if secret is None or not line.startswith(b"auth "):
        return False
    import hmac

    return hmac.compare_digest(line[5:].rstrip(b"\r\n"), proof(secret, nonce, request))


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


def encode_streaming(epoch: int, next_offset: int, history: Sequence[tuple[int, int]],
                     ack_delay_ms: int | None = None) -> bytes:  # fmt: skip
    """``ack_delay_ms``: only for a request that is ``paced`` (None: the field is left out).

    >>> encode_streaming(2, 40, [(2, 0)]), encode_streaming(2, 40, [(2, 0)], 10)
    (b'STREAMING 2 40 2:0\\r\\n', b'STREAMING 2 40 2:0 10\\r\\n')
    """
    tail = "" if ack_delay_ms is None else f" {ack_delay_ms}"
    return f"STREAMING {epoch} {next_offset} {format_history(history)}{tail}\r\n".encode()


class Reply:
    """The primary's first line, parsed: ``word`` and its integer/text arguments."""

    __slots__ = ("word", "args")

    def __init__(self, word: str, args: tuple[str, ...]) -> None:
        self.word = word
        self.args = args

    def __repr__(self) -> str:
        return f"Reply({self.word!r}, {self.args!r})"


_ARITY = {"STREAMING": (3, 4), "SNAPSHOT": (4,), "SNAPSHOT_NEEDED": (0,), "DIVERGED": (1,), "NOT_PRIMARY": (0,),
          "PERMISSION_DENIED": (0,), "CHALLENGE": (1,)}  # fmt: skip


def parse_reply(line: bytes) -> Reply:
    """Example:

    >>> parse_reply(b"DIVERGED 40\\r\\n")
    Reply('DIVERGED', ('40',))
    """
    parts = line.rstrip(b"\r\n").decode("ascii", "replace").split(" ")
    word, args = parts[0], tuple(parts[1:])
    if len(args) not in _ARITY.get(word, ()):
        raise WireError(f"unexpected reply from the primary: {line[:120]!r}")
    return Reply(word, args)


def ack_delay(reply: Reply) -> float:
    """The seconds a standby may hold an acknowledgement back, from its ``STREAMING`` reply (0:
    none, also from a primary of a build before the field), at most ``HEARTBEAT``: the
    heartbeat's answer goes out anyway, and a primary's report of the standby's lag is never
    staler than that.

    >>> ack_delay(parse_reply(b"STREAMING 2 40 2:0\\r\\n")), ack_delay(parse_reply(b"STREAMING 2 40 2:0 10\\r\\n"))
    (0.0, 0.01)
    >>> ack_delay(parse_reply(b"STREAMING 2 40 2:0 99999\\r\\n")) == HEARTBEAT
    True
    """
    if len(reply.args) < 4:
        return 0.0
    ms = reply.args[3]
    if not ms.isdigit() or len(ms) > 9:
        raise WireError(f"bad acknowledgement delay {ms[:20]!r} in the primary's STREAMING reply")
    return min(int(ms) / 1000, HEARTBEAT)


def encode_records(first: int, payloads: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """One records message as parts to write in order (payloads are not copied).

    >>> d = RecordDecoder(); d.feed(b"".join(encode_records(5, [b"a", b"bc"])))
    [(5, [b'a', b'bc'])]
    """
    head = _FIRST.pack(first)
    parts: list[bytes | memoryview] = [b"", head]
    size = _FIRST.size
    crc = zlib.crc32(head)
    pack = _LEN.pack
    for p in payloads:
        n = len(p)
        ln = pack(n)
        parts.append(ln)
        parts.append(p)
        crc = zlib.crc32(p, zlib.crc32(ln, crc))
        size += 4 + n
    parts[0] = _MSG.pack(_KIND_RECORDS, size, crc)
    return parts


@cython.locals(size=cython.Py_ssize_t, out=bytes, prefix=bytes, head=cython.uint)
def encode_frames(first: int, base: int, frames: bytes | bytearray | memoryview) -> bytes:
    """One frames message: ``frames``, the log's frames of offsets ``first``... as they lie in
    the primary's segment based at ``base`` (copied once, here; one CRC-32C pass).

    >>> from stalkd.log.frame import encode_data_frames
    >>> d = RecordDecoder(); d.feed(encode_frames(12, 10, encode_data_frames([b"a", b"bc"], 2, 0, 1)))
    [(12, [b'a', b'bc'])]
    """
    # (the log's modules are imported where first used: every listener imports this module,
    # and a server in memory loads no log code; then kept, as this runs once per batch)
    crc32c = _crc32c_of_log or _load_crc32c()
    if not cython.compiled:
        head_ = _FRAMES_HEAD.pack(first, base)
        return b"".join((_MSG.pack(_KIND_FRAMES, len(head_) + len(frames), crc32c(frames, crc32c(head_))),
                         head_, frames))  # fmt: skip
    if _crc_c != cython.NULL and type(frames) is bytes:
        return _frames_message(first, base, cython.cast(cython.p_uchar, cython.cast(cython.p_char, frames)),
                               len(frames))  # fmt: skip
    # Compiled, once per group commit to each standby: the frames copied once behind room for
    # the header and the head, which are stored into that new object (nobody else holds it
    # yet), and the head's CRC summed here (16 bytes: a call of the package's costs more).
    prefix = _FRAMES_PREFIX
    out = prefix + frames
    size = len(out) - _MSG_SIZE
    b = cython.declare(cython.p_uchar, cython.cast(cython.p_uchar, cython.cast(cython.p_char, out)))
    _store_le(b, _MSG_SIZE, first, 8)
    _store_le(b, _MSG_SIZE + 8, base, 8)
    head = _crc32c_short(b, _MSG_SIZE, _FRAMES_AT)
    b[0] = _KIND_FRAMES
    _store_le(b, 1, size, 4)
    _store_le(b, 5, crc32c(frames, head), 4)
    return out


@cython.locals(n=cython.Py_ssize_t, src=cython.p_uchar)
def encode_span(first: int, base: int, mv: memoryview, start: int, end: int) -> bytes:
    """``encode_frames(first, base, mv[start:end])`` without the slice: the sender's message per
    group commit, ``mv`` the log's mapping of the segment (``FrameSpan``), which the message
    holds no view of afterwards (retention may close it).

    >>> span = memoryview(b"..abc.")
    >>> encode_span(3, 1, span, 2, 5) == encode_frames(3, 1, b"abc")
    True
    """
    if _crc32c_of_log is None:
        _load_crc32c()
    if cython.compiled and _crc_c != cython.NULL and type(mv) is memoryview:
        # Compiled, the mapping's bytes copied once by memcpy into the message and summed by
        # the log's own CRC-32C (the CPU's instruction): no slice, no view to release, no call
        # of the package's (callgrind: ~1.4k instructions a message less)
        n = len(mv)  # (a released mapping raises here)
        buf = PyMemoryView_GET_BUFFER(mv)
        if 0 <= start <= end <= n and buf.itemsize == 1 and PyBuffer_IsContiguous(buf, b"C"):
            src = cython.cast(cython.p_uchar, buf.buf)
            return _frames_message(first, base, cython.address(src[start]), end - start)
    view = memoryview(mv)[start:end]
    try:
        return encode_frames(first, base, view)
    finally:
        view.release()


@cython.cfunc
@cython.returns(bytes)
@cython.locals(first=cython.Py_ssize_t, base=cython.Py_ssize_t, src=cython.p_uchar, n=cython.Py_ssize_t, out=bytes)
def _frames_message(first: int, base: int, src: bytes, n: int) -> bytes:
    """The frames message of the ``n`` bytes at ``src`` (a C pointer): a new object of the
    message's size, the frames copied in once, header and head stored, its body summed by the
    log's ``_crc_update`` (``_crc_c``, not NULL). Compiled only."""
    out = PyBytes_FromStringAndSize(cython.NULL, _FRAMES_AT + n)
    b = cython.declare(cython.p_uchar, cython.cast(cython.p_uchar, cython.cast(cython.p_char, out)))
    memcpy(cython.address(b[_FRAMES_AT]), src, n)
    _store_le(b, _MSG_SIZE, first, 8)
    _store_le(b, _MSG_SIZE + 8, base, 8)
    b[0] = _KIND_FRAMES
    _store_le(b, 1, _FRAMES_AT - _MSG_SIZE + n, 4)
    _store_le(b, 5, _crc_c(0, b, _MSG_SIZE, _FRAMES_AT + n), 4)
    return out


@cython.cfunc
@cython.inline
@cython.locals(b=cython.p_uchar, at=cython.Py_ssize_t, value=cython.ulonglong, width=cython.Py_ssize_t,
               k=cython.Py_ssize_t)  # fmt: skip
def _store_le(b: bytearray, at: int, value: int, width: int) -> None:
    """``value``'s ``width`` low bytes, little-endian, at ``b[at]`` (``b`` a C pointer; compiled
    only)."""
    for k in range(width):
        b[at + k] = (value >> (8 * k)) & 0xFF


@cython.cfunc
@cython.returns(cython.uint)
@cython.locals(b=cython.p_uchar, i=cython.Py_ssize_t, end=cython.Py_ssize_t, c=cython.uint, ones=cython.uint,
               t=cython.p_uint)  # fmt: skip
def _crc32c_short(b: bytearray, i: int, end: int) -> int:
    """CRC-32C (the log's checksum) of the few bytes ``b[i:end]``, a byte at a time by the
    table ``_load_crc32c`` made (``b`` a C pointer; compiled only). Checked against the
    ``crc32c`` package's sum by tests/replication/test_wire.py."""
    t = cython.cast(cython.p_uint, cython.cast(cython.p_char, _CRC32C_BYTE))
    ones = 0xFFFFFFFF  # (a C variable: the constant does not fit a C int, and would be Python's)
    c = ones
    while i < end:
        c = t[(c ^ b[i]) & 0xFF] ^ (c >> 8)
        i += 1
    return c ^ ones


_crc32c_of_log: Callable[..., int] | None = None
# The log's frame header as _whole_frames reads it (frame.py's HEAD_FIELDS: crc, magic, flags,
# epoch, length, delta, timestamp), checked against the log's own when it is loaded: a format
# change turns the C scan off (_SCAN_FRAMES) and every message takes data_payloads' path.
_FRAME_LAYOUT = ((("crc", "I"), ("magic", "B"), ("flags", "B"), ("epoch", "H"), ("length", "I"), ("delta", "I"),
                  ("timestamp_us", "q")), 24, 0xA7, 0x7F)  # fmt: skip
_F_HEADER, _F_MAGIC_AT, _F_FLAGS_AT, _F_EPOCH_AT, _F_LENGTH_AT, _F_DELTA_AT = 24, 4, 5, 6, 8, 12
_F_MAGIC, _F_KIND = 0xA7, 0x7F
_SCAN_FRAMES = False
_CRC32C_BYTE = b""  # compiled: _crc32c_short's table (256 native u32), made with the above


def _load_crc32c() -> Callable[..., int]:
    global _crc32c_of_log, _CRC32C_BYTE, _crc_c, _SCAN_FRAMES
    from stalkd.log import frame
    from stalkd.log.crc import crc32c

    if cython.compiled:
        # _whole_frames reads a frame's header at the places below: only while they are the log's
        _SCAN_FRAMES = (frame.HEAD_FIELDS, frame.FRAME_HEADER_SIZE, frame.MAGIC, frame.KIND_MASK) == _FRAME_LAYOUT
        _CRC32C_BYTE = frame.crc32c_tables()[:1024]  # table 0: 256 native u32, a byte at a time
        # The log's own C sum, taken from its compiled module's table of C functions (what a
        # cimport reads, here only once a message is encoded: a cimport would load the log at
        # this module's import), where its C signature is the one declared in wire.pxd; else
        # NULL, and the package's sum serves.
        sig = b"unsigned int (unsigned int, unsigned char *, Py_ssize_t, Py_ssize_t)"
        cap = getattr(frame, "__pyx_capi__", {}).get("_crc_update")
        if cap is not None and PyCapsule_IsValid(cap, sig):
            _crc_c = cython.cast(_crc_fn, PyCapsule_GetPointer(cap, sig))
    _crc32c_of_log = crc32c
    return crc32c


if not cython.compiled:  # compiled, wire.pxd takes these from C

    _crc_c: Any = None
    _crc_fn = object

    def PyMemoryView_GET_BUFFER(mv: memoryview) -> Any:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")

    def PyBuffer_IsContiguous(buf: object, order: bytes) -> bool:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")

    def PyBytes_FromStringAndSize(s: object, n: int) -> bytes:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")

    def PyCapsule_IsValid(cap: object, name: bytes) -> bool:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")

    def PyCapsule_GetPointer(cap: object, name: bytes) -> Any:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")

    def memcpy(to: object, source: object, n: int) -> None:
        raise NotImplementedError("compiled only")


_data_payloads: Callable[..., list[bytes] | None] | None = None  # log.frame's, once a frames message came


def _load_data_payloads() -> Callable[..., list[bytes] | None]:
    """(an import per message, in the function, cost a standby ~4k instructions a message)"""
    global _data_payloads
    from stalkd.log.frame import data_payloads

    _data_payloads = data_payloads
    return data_payloads


def _frame_payloads(body: memoryview) -> tuple[int, list[bytes]]:
    """A frames message's body -> (first offset, payloads), every frame checked as a reader of
    the primary's segment would (CRC-32C, magic, delta from the base, kind); WireError else."""
    first, base = _FRAMES_HEAD.unpack_from(body, 0)
    if first < base:
        raise WireError(f"a frames message starts at offset {first}, before its segment's base {base}")
    size = len(body)
    payloads = (_data_payloads or _load_data_payloads())(body, _FRAMES_HEAD.size, size, base, first, _MAX_EPOCH)
    if payloads is None:  # the scan names the frame, for the message
        from stalkd.log.frame import FRAME_HEADER_SIZE, ScanState, scan_positions

        st = ScanState(_FRAMES_HEAD.size, first)
        scan_positions(body, base, _MAX_EPOCH, st, size, None, 0, size // FRAME_HEADER_SIZE + 1)
        raise WireError(f"a frame from the primary fails its checks (offset {st.offset}): damaged or out of place")
    return first, payloads


def encode_heartbeat(end_offset: int) -> bytes:
    """The primary's heartbeat: its log's end.

    >>> d = RecordDecoder(); d.feed(encode_heartbeat(42)), d.primary_end
    ([], 42)
    >>> d.feed(encode_heartbeat(42) * 2), d.heartbeats
    ([], 3)
    """
    body = _FIRST.pack(end_offset)
    return _MSG.pack(_KIND_HEARTBEAT, len(body), zlib.crc32(body)) + body


@cython.cclass
class RecordDecoder:
    """Bytes from the primary -> ``(first offset, [payloads])`` per complete records message;
    a heartbeat sets ``primary_end``. Every message's length is checked before it is buffered
    and its CRC before any of it is returned (WireError). Compiled, an extension type (wire.pxd):
    the standby's receiver feeds it every read as a C call."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.primary_end = -1  # the last heartbeat's (-1: none yet)
        self.heartbeats = 0  # how many came: each is answered, an idle stream's all alike

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[tuple[int, list[bytes]]]:
        """Example: a claim beyond the limit is refused at once, a wrong CRC when complete.

        >>> RecordDecoder().feed(_MSG.pack(_KIND_RECORDS, 2**32 - 1, 0))
        Traceback (most recent call last):
        ...
        stalkd.replication.wire.WireError: bad message from the primary (kind 82, 4294967295 bytes)
        >>> m = bytearray(b"".join(encode_records(5, [b"abc"]))); m[-1] ^= 1
        >>> RecordDecoder().feed(bytes(m))
        Traceback (most recent call last):
        ...
        stalkd.replication.wire.WireError: a message from the primary fails its CRC (offset 5): damaged in transit
        """
        buf = self._buf
        out: list[tuple[int, list[bytes]]] = []
        if cython.compiled:
            if _crc32c_of_log is None:
                _load_crc32c()
            if _SCAN_FRAMES and _crc_c != cython.NULL and not buf and type(data) is bytes:
                # The usual read: whole frames messages, taken straight from ``data`` (no copy
                # into the buffer, no view, no struct call or scan state per message)
                pos = _whole_frames(cython.cast(cython.p_uchar, cython.cast(cython.p_char, data)), 0, len(data), out)
                if pos == len(data):
                    return out
                data = data[pos:]
        buf += data
        pos = 0
        while len(buf) - pos >= _MSG.size:
            if cython.compiled and _SCAN_FRAMES and _crc_c != cython.NULL and buf[pos] == _KIND_FRAMES:
                taken = _whole_frames(cython.cast(cython.p_uchar, cython.cast(cython.p_char, buf)), pos, len(buf), out)  # type: ignore[arg-type]
                if taken != pos:
                    pos = taken
                    continue  # (else: not whole yet, or refused below, by the same checks)
            kind, size, crc = _MSG.unpack_from(buf, pos)
            if (kind not in (_KIND_RECORDS, _KIND_HEARTBEAT, _KIND_FRAMES) or size > MAX_MESSAGE
                    or size < (_FRAMES_HEAD.size if kind == _KIND_FRAMES else _FIRST.size)):
                raise WireError(f"bad message from the primary (kind {kind}, {size} bytes)")
            start = pos + _MSG.size
            end = start + size
            if len(buf) < end:
                break
            # (a view released by hand, not two ``with`` blocks: once per message, and compiled
            # their __enter__/__exit__ lookups cost more than the CRC of a small message)
            body = memoryview(buf)[start:end]
            try:
                (first,) = _FIRST.unpack_from(body, 0)
                if kind == _KIND_FRAMES:
                    good = (_crc32c_of_log or _load_crc32c())(body) == crc
                else:
                    good = zlib.crc32(body) == crc
                if not good:
                    raise WireError(f"a message from the primary fails its CRC (offset {first}): damaged in transit")
                if kind == _KIND_FRAMES:
                    out.append(_frame_payloads(body))
            finally:
                body.release()
            pos = end
            if kind == _KIND_FRAMES:
                continue
            if kind == _KIND_HEARTBEAT:
                self.primary_end = first
                self.heartbeats += 1
                continue
            p = start + _FIRST.size
            payloads = []
            while p < end:
                if p + 4 > end:
                    raise WireError("a record length runs past the end of its message")
                (n,) = _LEN.unpack_from(buf, p)
                p += 4
                if p + n > end:
                    raise WireError("a record runs past the end of its message")
                payloads.append(bytes(buf[p:p + n]))
                p += n
            out.append((first, payloads))
        if pos:
            del buf[:pos]
        return out


@cython.cfunc
@cython.locals(p=cython.p_uchar, pos=cython.Py_ssize_t, n=cython.Py_ssize_t, end=cython.Py_ssize_t,
               at=cython.Py_ssize_t, nxt=cython.Py_ssize_t, length=cython.Py_ssize_t, size=cython.Py_ssize_t,
               first=cython.ulonglong, base=cython.ulonglong, d=cython.ulonglong, epoch=cython.uint,
               last_epoch=cython.uint, payloads=list, whole=cython.bint)  # fmt: skip
def _whole_frames(p: bytes, pos: int, n: int, out: list[tuple[int, list[bytes]]]) -> int:
    """From ``p[pos]`` (a C pointer to ``n`` bytes; compiled only, with the log's ``_crc_c``),
    the frames messages that are whole and pass every check ``feed`` makes (the message's
    length and CRC-32C; each frame's CRC-32C, magic, kind, delta and epoch order, the frames
    filling the body exactly, as ``data_payloads``) appended to ``out``, their payloads copied
    out once each; returns the position after the last one taken. It stops at the first
    message that is anything else (another kind, not whole yet, or failing a check), which
    ``feed``'s own path then reads or refuses: this takes a subset of what that path takes,
    with the same result, and refuses nothing itself."""
    while n - pos >= _FRAMES_AT and p[pos] == _KIND_FRAMES:
        size = _load_le32(p, pos + 1)
        end = pos + _MSG_SIZE + size
        if size > _MAX_MESSAGE_C or size < _FRAMES_AT - _MSG_SIZE or end > n:
            break
        if _crc_c(0, p, pos + _MSG_SIZE, end) != _load_le32(p, pos + 5):
            break
        first = _load_u64(cython.address(p[pos + _MSG_SIZE]))
        base = _load_u64(cython.address(p[pos + _MSG_SIZE + 8]))
        if first < base or first >= _OFFSET_LIMIT:
            break
        d = first - base
        at = pos + _FRAMES_AT
        last_epoch = 0
        payloads = []
        whole = True
        while at < end:
            if at + _F_HEADER > end:
                whole = False
                break
            length = _load_le32(p, at + _F_LENGTH_AT)
            nxt = at + ((_F_HEADER + length + 7) & ~7)  # (frames are 8-aligned in the body, not in ``p``)
            epoch = p[at + _F_EPOCH_AT] | (cython.cast(cython.uint, p[at + _F_EPOCH_AT + 1]) << 8)
            if (_load_le32(p, at + _F_DELTA_AT) != d or p[at + _F_MAGIC_AT] != _F_MAGIC
                    or p[at + _F_FLAGS_AT] & _F_KIND or epoch < last_epoch or nxt > end
                    or _load_le32(p, at) != _crc_c(0, p, at + 4, nxt)):  # fmt: skip
                whole = False
                break
            payloads.append(PyBytes_FromStringAndSize(cython.cast(cython.p_char, cython.address(p[at + _F_HEADER])),
                                                      length))  # fmt: skip
            last_epoch = epoch
            at = nxt
            d += 1
        if not whole:
            break
        out.append((first, payloads))
        pos = end
    return pos


@cython.cfunc
@cython.inline
@cython.locals(b=cython.p_uchar, at=cython.Py_ssize_t)
@cython.returns(cython.ulonglong)
def _load_le32(b: bytes, at: int) -> int:
    """The little-endian u32 at ``b[at]`` (a C pointer; compiled only)."""
    return (b[at] | (cython.cast(cython.ulonglong, b[at + 1]) << 8) | (cython.cast(cython.ulonglong, b[at + 2]) << 16)
            | (cython.cast(cython.ulonglong, b[at + 3]) << 24))  # fmt: skip


@cython.cfunc
@cython.inline
@cython.locals(b=cython.p_uchar, value=cython.ulonglong, k=cython.Py_ssize_t)
def _load_u64(b: bytes) -> int:
    """The little-endian u64 at ``b`` (a C pointer; compiled only)."""
    value = 0
    for k in range(8):
        value |= cython.cast(cython.ulonglong, b[k]) << (8 * k)
    return value


def plain_fd(transport: object) -> int:
    """The descriptor of the socket under ``transport`` when the stream's bytes on it are the
    messages above as written (a plain socket), which a primary may read acknowledgements from
    and a standby's committer thread may write them to beside the transport; -1 when they are
    not or there is no socket: a TLS stream (only its TLS layer reads and writes its bytes), or
    a transport without one (a test's). (uvloop's socket is a pseudo-socket whose descriptor is
    the transport's.)"""
    get = getattr(transport, "get_extra_info", None)
    if get is None or get("sslcontext") is not None or get("ssl_object") is not None:
        return -1
    sock = get("socket")
    if sock is None:
        return -1
    try:
        return int(sock.fileno())
    except (OSError, ValueError, AttributeError):
        return -1


def encode_ack(durable_end: int) -> bytes:
    """A standby's acknowledgement of ``durable_end`` (compiled: stored in C, no struct call;
    a standby sends one per fsync)."""
    if cython.compiled and 0 <= durable_end < _OFFSET_LIMIT:
        out: bytes = PyBytes_FromStringAndSize(cython.NULL, 8)
        b = cython.declare(cython.p_uchar, cython.cast(cython.p_uchar, cython.cast(cython.p_char, out)))
        _store_le(b, 0, durable_end, 8)
        return out
    return _ACK.pack(durable_end)


@cython.cclass
class AckDecoder:
    """Bytes from a standby -> the latest durable end offset it reported (None: none yet)."""

    _buf: bytes  # a C field when compiled (wire.pxd): the sender feeds every read here

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> int | None:
        """Example:

        >>> AckDecoder().feed(encode_ack(3) + encode_ack(9)[:4])
        3
        """
        if not self._buf and len(data) == _ACK_SIZE:  # one whole acknowledgement: the usual read
            if cython.compiled and type(data) is bytes:  # (a C read: no method call)
                return _load_u64(cython.cast(cython.p_uchar, cython.cast(cython.p_char, data)))
            return int.from_bytes(data, "little")
        buf = self._buf + data
        whole = len(buf) - len(buf) % _ACK.size
        self._buf = buf[whole:]
        if not whole:
            return None
        return int(_ACK.unpack_from(buf, whole - _ACK.size)[0])

    @cython.locals(value=cython.ulonglong)
    def take(self, data: bytes) -> int:
        """``feed``, for the sender: -1 where ``feed`` gives None, a C integer compiled (no int
        object per acknowledgement); WireError for an offset no log reaches (2**63 or more).

        >>> d = AckDecoder(); d.take(encode_ack(3)[:5]), d.take(encode_ack(3)[5:] + encode_ack(9))
        (-1, 9)
        """
        if cython.compiled and not self._buf and type(data) is bytes and len(data) == _ACK_SIZE:
            value = _load_u64(cython.cast(cython.p_uchar, cython.cast(cython.p_char, data)))
            if value < _OFFSET_LIMIT:
                return value
        ack = self.feed(data)
        if ack is None:
            return -1
        if ack >= _OFFSET_LIMIT:
            raise WireError(f"acknowledged offset {ack}: no log reaches it")
        return ack
