"""The primary's side of replication: one stream per standby, read back from its own log.

A connection whose first line is a replication request (``wire``) is handed here by the
listener (``Replicas.take_over``). The stream is read from the log's segments (what is written
is in the page cache), so a standby that is behind and one that is current take the same path,
and nothing is buffered per standby beyond what its socket holds: while the transport's buffer
is above its limit the sender stops reading the log.

Only an authenticated peer streams (``wire``: an ACL grant on a TLS listener, or the shared
secret's challenge); a refusal is counted (``refused``) and logged at most once per
``REFUSAL_LOG_EVERY`` seconds. A claim of a newer epoch in a request fences this server only
when ``Role.claim`` verifies it. Every ``wire.HEARTBEAT`` seconds each stream gets a heartbeat
(the log's end), and a standby silent for ``wire.SILENT_AFTER`` seconds is dropped; the same
tick notices a ``--sync-standbys`` primary whose replies wait for standbys (``waiting``),
logged at most once per ``WAIT_LOG_EVERY`` seconds.

Ensures:
- Records reach a standby in offset order, without gaps: if retention removed an offset the
  standby still needs, the stream ends (the standby then copies a snapshot).
- An acknowledgement moves the ``--sync-standbys`` gate; a standby that goes away stops
  counting at once.
- While standbys are connected, retention keeps what the slowest of them has not acknowledged
  (``hold``); a disconnected standby holds nothing back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from stalkd.log.log import frames_span
from stalkd.log.reader import FrameSpan, ReadPos, SegmentViews
from stalkd.log.writer import SegmentWriter
from stalkd.persist.snapshot import list_snapshots, read_header
from stalkd.replication import wire
from stalkd.replication.epochs import diverged_at
from stalkd.replication.gate import SyncGate
from stalkd.replication.role import Role
from stalkd.replication.wire import AckDecoder, WireError, encode_span

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
    from stalkd.log import Log
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Replicas", "Sender"]

log = logging.getLogger("stalkd.replication")

CHUNK_BYTES = 1 << 20  # payload bytes per records message
CHUNK_RECORDS = 8192
_WRITE_LIMIT = 4 << 20  # transport buffer above which the sender pauses
_POLL_BYTES = 4096  # acknowledgements are 8 bytes each: one read takes all that wait
REFUSAL_LOG_EVERY = 10.0  # seconds between log lines about refused replication attempts
WAIT_LOG_EVERY = 5.0  # seconds between log lines while replies wait for standbys
WAIT_REPORT_AFTER = 0.5  # seconds replies wait for standbys before it is reported
ASYNC_SEND_EVERY = 0.002  # seconds: group commits sent together to asynchronous standbys
# milliseconds an asynchronous standby may hold back its acknowledgements (told at the stream's
# start, ``wire``): no reply waits for them; retention and the reported lag trail by that much
ASYNC_ACK_DELAY_MS = 10


@cython.cclass
class Replicas:
    """The standbys of this primary.

    ``on_replicated`` is called when the gate moved (the server releases held replies);
    ``secret``: the shared replication secret (None: only ACL grants admit a standby);
    ``on_follower(epoch)``: an authenticated standby streams, following ``epoch``."""

    # C fields when compiled (sender.pxd): every batch written and every message and
    # acknowledgement of a stream read the log's end through these (``_writer.next``), and the
    # gate and the streams, as C fields
    _log: Log
    _writer: SegmentWriter  # the log's (``log``'s setter keeps them together)
    _views: SegmentViews  # the log's mappings
    snap_dir: str
    role: Role
    gate: SyncGate | None
    on_replicated: Callable[[], None]
    secret: str | None
    on_follower: Callable[[int], None] | None
    clock: Callable[[], float]
    senders: set[Sender]
    _streams: tuple[Sender, ...]
    refused: int
    _refusal_logged: float
    _refused_logged: int
    waiting_since: float | None
    _wait_batch: int | None
    _wait_logged: float
    _tick: asyncio.TimerHandle | None
    _send_soon: asyncio.TimerHandle | None
    _loop: asyncio.AbstractEventLoop | None

    def __init__(self, log_: Log, snap_dir: str, role: Role, sync_standbys: int,
                 on_replicated: Callable[[], None], *, secret: str | None = None,
                 on_follower: Callable[[int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.log = log_
        self.snap_dir = snap_dir
        self.role = role
        self.gate = SyncGate(sync_standbys) if sync_standbys else None
        self.on_replicated = on_replicated
        self.secret = secret
        self.on_follower = on_follower
        self.clock = clock
        self.senders = set()
        self._streams = ()  # the senders, as of their last change (pumped per batch)
        self.refused = 0  # replication attempts refused (not authenticated), since start
        self._refusal_logged = -REFUSAL_LOG_EVERY
        self._refused_logged = 0
        self.waiting_since = None  # the oldest unreplicated batch waits since then
        self._wait_batch = None
        self._wait_logged = -WAIT_LOG_EVERY
        self._tick = None
        self._send_soon = None  # the next send to async standbys
        self._loop = None  # start's (get_running_loop asks getpid(2))

    @property
    def log(self) -> Log:
        """The log the streams read (a resync opens the WAL's again: the owner sets the new one)."""
        return self._log

    @log.setter
    def log(self, lg: Log) -> None:
        self._log = lg
        self._writer = lg._writer
        self._views = lg._views

    def start(self) -> None:
        """Heartbeats, silent standbys and the waiting report, every ``wire.HEARTBEAT`` s."""
        loop = self._loop = asyncio.get_running_loop()

        def tick() -> None:
            self.heartbeat()
            self._tick = loop.call_later(wire.HEARTBEAT, tick)

        self._tick = loop.call_later(wire.HEARTBEAT, tick)

    def take_over(self, transport: asyncio.BaseTransport, data: bytes, granted: bool) -> None:
        """A listener's connection whose first bytes ``data`` start a replication request;
        ``granted``: the listener's ACL lets this identity replicate (no secret needed)."""
        s = Sender(self, granted, None)
        transport.set_protocol(cast(asyncio.BaseProtocol, s))  # (a protocol by its methods)
        s.connection_made(transport)
        s.data_received(data)

    def refuse(self, peer: str, why: str) -> None:
        """Count a refused replication attempt; log it at a bounded rate."""
        self.refused += 1
        now = self.clock()
        if now - self._refusal_logged >= REFUSAL_LOG_EVERY:
            more = self.refused - self._refused_logged - 1
            log.warning("refused replication to %s: %s%s", peer, why,
                        f" ({more} more refused since the last such line)" if more > 0 else "")  # fmt: skip
            self._refusal_logged = now
            self._refused_logged = self.refused

    @cython.locals(s="Sender")  # (a name defined below)
    def written(self) -> None:
        """New records were written to the log: stream them. When no reply waits for a standby
        (no ``--sync-standbys``), the group commits of the next ``ASYNC_SEND_EVERY`` seconds
        go out together: at depth 1 a group commit is a few records, and one send per commit
        would cost the primary a system call (and, on one machine, the receiving side of TCP)
        for every few jobs; an asynchronous standby lags by that much more."""
        if self.gate is not None:
            for s in self._streams:  # (a reply waits for this: no call between)
                s.pump()
        elif self._send_soon is None:
            loop = self._loop or asyncio.get_running_loop()
            self._send_soon = loop.call_later(ASYNC_SEND_EVERY, self._send)

    @cython.locals(s="Sender")  # (a name defined below)
    def poll_acks(self) -> None:
        """Read now what the standbys have sent, while a batch waits for their acknowledgement
        (--sync-standbys; the barriers call this after each batch they write). An
        acknowledgement that arrived while the loop ran a round of client commands would else
        be read only in the next round, after the clients ready with it: the replies it
        releases would wait a round of other clients' work."""
        gate = self.gate
        if gate is None or not gate._waiting:
            return
        for s in self._streams:
            s.poll()

    @cython.locals(s="Sender")  # (a name defined below)
    def _send(self) -> None:
        self._send_soon = None
        for s in self._streams:
            s.pump()

    def end_offset(self) -> int:
        """The log's end (the barriers' ``end_offset``, asked after every batch they write)."""
        return self._writer.next  # (``log.next_offset``: a C field, where the property is a call)

    def joined(self, s: Sender) -> None:
        """``s`` streams from now on."""
        self.senders.add(s)
        self._streams = tuple(self.senders)

    def lost(self, s: Sender) -> None:
        self.senders.discard(s)
        self._streams = tuple(self.senders)
        if self.gate is not None:
            self.gate.drop(s)

    def hold(self) -> int | None:
        """The lowest offset a connected standby still needs (None: no standby). Called by
        retention, possibly on the snapshot thread: the set is copied in one C call first."""
        needs = [s.acked for s in tuple(self.senders)]
        return min(needs) if needs else None

    def lags(self) -> list[tuple[str, int, float]]:
        """``(peer, records not yet acknowledged, seconds since it last held the whole log)``
        per connected standby."""
        end = self.log.next_offset
        now = self.clock()
        return sorted((s.peer, end - s.acked, 0.0 if s.acked >= end else now - s.caught_up_at)
                      for s in self.senders)  # fmt: skip

    def heartbeat(self) -> None:
        """Beat every stream, drop the silent ones, notice replies waiting for standbys."""
        now = self.clock()
        end = self.log.next_offset
        beat = wire.encode_heartbeat(end)
        for s in list(self.senders):
            if now - s.heard > wire.SILENT_AFTER:
                s.drop(f"nothing heard for {now - s.heard:.1f} s (the network or the standby is down)")
            elif s.transport is not None and not s.paused:
                s.transport.write(beat)
        gate = self.gate
        oldest = gate.oldest_waiting() if gate is not None else None
        if oldest != self._wait_batch:  # a batch waits since now, or none (a busy gate moves on)
            if oldest is None and self.waiting() is not None:
                log.info("replies no longer wait for standbys (%d connected)", len(self.senders))
            self._wait_batch = oldest
            self.waiting_since = None if oldest is None else now
            return
        if self.waiting_since is None:
            return
        # the same batch has waited since then
        if now - self.waiting_since >= WAIT_REPORT_AFTER and now - self._wait_logged >= WAIT_LOG_EVERY:
            self._wait_logged = now
            log.warning("%s", self.waiting())

    def waiting(self) -> str | None:
        """Why replies wait for standbys, once they have for ``WAIT_REPORT_AFTER`` s (None: not)."""
        since, gate = self.waiting_since, self.gate
        if since is None or gate is None or self.clock() - since < WAIT_REPORT_AFTER:
            return None
        return (f"waiting for standbys: --sync-standbys {gate.need} and {len(self.senders)} connected; "
                f"replies held for {self.clock() - since:.1f} s (they go out once {gate.need} "
                f"standby(s) hold the writes)")

    def close(self) -> None:
        if self._tick is not None:
            self._tick.cancel()
        if self._send_soon is not None:
            self._send_soon.cancel()
        for s in list(self.senders):
            s.close()


if not cython.compiled:  # compiled, sender.pxd takes it from C

    def read(fd: int, buf: object, n: int) -> int:
        raise NotImplementedError("compiled only")


def _not_connected(data: bytes) -> None:
    raise RuntimeError("a stream written before its connection was made")


def _not_closing() -> bool:
    return False


@cython.cclass
class Sender:
    """One standby's connection, after the listener handed it over: an asyncio protocol (by its
    methods; compiled, an extension type, which cannot derive from ``asyncio.Protocol``)."""

    # C fields when compiled (sender.pxd): a message out (``pump``) and an acknowledgement in
    # (``data_received``) per group commit at depth 1 read and write these.
    replicas: Replicas
    granted: bool
    identity: str | None
    transport: asyncio.WriteTransport | None
    peer: str
    _line: bytes
    _acks: AckDecoder
    streaming: bool
    paused: bool
    next: int
    acked: int
    name: str
    frames: bool
    _sent_frames: int
    _sent_records: int
    _snap_fd: int
    _fd: int
    _pos: ReadPos
    _span: FrameSpan
    _challenge: tuple[bytes, bytes, wire.Request | None] | None
    heard: float
    caught_up_at: float
    _clock: Callable[[], float]
    _gate: SyncGate | None
    _on_replicated: Callable[[], None]
    _write: Callable[[bytes], None]
    _is_closing: Callable[[], bool]

    def __init__(self, replicas: Replicas, granted: bool, identity: str | None) -> None:
        self.replicas = replicas
        self.granted = granted
        self.identity = identity
        self.transport = None
        self._write = _not_connected  # the transport's write and is_closing, once connected
        self._is_closing = _not_closing
        self.peer = "?"
        self._line = b""
        self._acks = AckDecoder()
        self.streaming = False
        self.paused = False
        self.next = 0  # next offset to send
        self.acked = 0  # the standby's durable end
        self.name = ""  # the standby's node name (--ha clusters), from its request
        self.frames = False  # it takes frames messages (its request says so; else records alone)
        self._sent_frames = self._sent_records = 0  # messages of each kind sent (``sent``)
        self._snap_fd = -1
        self._fd = -1  # the socket's descriptor, read ahead by poll (-1: not connected, or TLS)
        self._pos = ReadPos(-1, 0, 0)  # where the last read stopped: no segment rescan per batch
        self._span = FrameSpan()  # where the frames after ``_pos`` lie (pump's, per message)
        self._challenge = None  # nonce, line, request
        # what every acknowledgement asks of the replicas, taken once (none of them changes)
        self._clock = replicas.clock
        self._gate = replicas.gate
        self._on_replicated = replicas.on_replicated
        self.heard = self._clock()  # the last bytes from the standby
        self.caught_up_at = self.heard  # the last time its acknowledgement covered the log

    @property
    def sent(self) -> dict[str, int]:
        """Messages of each kind sent on this stream (``F`` frames, ``R`` records)."""
        return {"F": self._sent_frames, "R": self._sent_records}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)
        # (bound once: pump writes a message per group commit, and a method looked up on the
        # transport per call costs it a type lookup)
        self._write = self.transport.write
        self._is_closing = self.transport.is_closing
        self.transport.set_write_buffer_limits(high=_WRITE_LIMIT)
        self._fd = wire.plain_fd(transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "unix")

    @cython.locals(a=cython.longlong)
    def data_received(self, data: bytes) -> None:
        if self.streaming:
            self.heard = now = self._clock()
            try:
                a = self._acks.take(data)  # (-1: no whole acknowledgement yet; a C integer)
            except WireError as e:
                self.drop(str(e))
                return
            if a < 0:
                return
            if a > self.next:
                self.drop(f"acknowledged offset {a}, beyond the {self.next} it was sent")
                return
            if a >= self.replicas._writer.next:  # (the log's end: C fields, no property call)
                self.caught_up_at = now
            if a > self.acked:
                self.acked = a
                self._acked(a)
            return
        if self.transport is None or self.transport.is_closing():
            return
        self._line += data
        end = self._line.find(b"\r\n")
        if end < 0:
            if len(self._line) > wire.MAX_LINE:
                self.drop("request line too long")
            return
        line, rest = self._line[:end + 2], self._line[end + 2:]
        self._line = b""
        self._request(line)
        if rest and self.streaming:
            self.data_received(rest)

    @cython.locals(n=cython.Py_ssize_t)
    def poll(self) -> None:
        """Take whatever the standby sent that the loop has not read yet (``poll_acks``): one
        non-blocking read of the socket, as the transport's own would be, handed to
        ``data_received``. Nothing to read, an error or the end of the stream are left to the
        transport, which reads the socket again and sees them too."""
        if self._fd < 0 or not self.streaming or self._is_closing():
            return  # (closing: the transport may have closed the descriptor, its number reused)
        # (EAGAIN: nothing sent; any other error, or the end, the transport's own read gets too)
        if cython.compiled:  # read(2) into the stack: nothing waiting costs no exception object
            buf = cython.declare(cython.char[4096])  # type: ignore[misc,valid-type]  # (a C array: _POLL_BYTES)
            n = read(self._fd, buf, 4096)
            if n <= 0:
                return
            data = buf[:n]
        else:
            try:
                data = os.read(self._fd, _POLL_BYTES)
            except OSError:
                return
            if not data:
                return
        self.data_received(data)

    def _acked(self, offset: int) -> None:
        """The standby holds everything below ``offset``: move the gate (``--sync-standbys``)."""
        gate = self._gate
        if gate is not None:
            before = gate.replicated
            gate.ack(self, offset)
            if gate.replicated != before:
                self._on_replicated()

    def eof_received(self) -> bool | None:
        return None  # the transport closes (asyncio.Protocol's answer)

    def _reply(self, line: bytes, close: bool = True) -> None:
        assert self.transport is not None
        self.transport.write(line)
        if close:
            self.transport.close()

    def _request(self, line: bytes) -> None:
        challenge = self._challenge
        if challenge is not None:  # ``line`` answers it
            self._challenge = None
            nonce, request_line, req = challenge
            if wire.check_auth(self.replicas.secret, nonce, request_line, line):
                self._serve(req)
            else:
                self._refuse("a wrong answer to the secret's challenge")
            return
        try:
            req = wire.parse_request(line)
        except WireError as e:
            self._refuse(str(e))
            return
        if self.granted:
            self._serve(req)
        elif self.replicas.secret is None:
            self._refuse("not authenticated (no ACL grant on this listener, and this server has no "
                         "--replication-secret)")
        else:
            nonce = wire.new_nonce()
            self._challenge = (nonce, line, req)
            self._reply(wire.encode_challenge(nonce), close=False)

    def _refuse(self, why: str) -> None:
        self.replicas.refuse(self.peer, why)
        self._reply(b"PERMISSION_DENIED\r\n")

    def _serve(self, req: wire.Request | None) -> None:
        """An authenticated request: stream, send the snapshot, or say why not."""
        role = self.replicas.role
        lg = self.replicas.log
        if req is not None and req.epoch > max(role.state.epoch, role.fenced):
            why = role.claim(req.epoch, req.history, lg.next_offset)
            if why is not None:
                log.warning("standby %s claims epoch %d, newer than ours (%d): not verified (%s); "
                            "ignored", self.peer, req.epoch, role.state.epoch, why)  # fmt: skip
                self.close()
                return
        if role.refuses():  # a standby's or a fenced primary's copy is nobody's to follow
            self._reply(b"NOT_PRIMARY\r\n")
            return
        if req is None:
            self._send_snapshot()
            return
        self.name, self.frames = req.name, req.frames
        offset, epoch = req.offset, req.epoch
        cut = diverged_at(role.state, lg.next_offset, epoch, offset)
        if cut is not None:
            self._reply(b"DIVERGED %d\r\n" % cut)
            return
        bounds = lg.segment_bounds()
        if bounds and offset < bounds[0][0]:
            self._reply(b"SNAPSHOT_NEEDED\r\n")
            return
        # (a standby that paces its acknowledgements is told how: at once when replies wait for them)
        delay = (0 if self._gate is not None else ASYNC_ACK_DELAY_MS) if req.paced else None
        self._reply(wire.encode_streaming(role.state.epoch, lg.next_offset, role.state.history, delay), close=False)
        log.info("standby %s%s streaming from offset %d%s", self.peer,
                 f" ({self.identity})" if self.identity else "", offset,
                 "" if self.frames else " (records messages: it did not ask for frames)")  # fmt: skip
        self.next = self.acked = offset
        self.streaming = True
        self.heard = self.replicas.clock()
        self.replicas.joined(self)
        role.note_standby()
        if self.replicas.on_follower is not None:
            self.replicas.on_follower(epoch)
        self._acked(offset)  # it holds everything below ``offset`` already
        self.pump()

    def pump(self) -> None:
        """Send what the log holds past ``next``, until caught up or the socket is full."""
        t = self.transport
        if t is None or not self.streaming:
            return
        r = self.replicas
        w = r._writer  # (the log's: its ``next`` is the log's end, a C field)
        at = self._pos
        sp = self._span
        while not self.paused and not self._is_closing():
            end = w.next
            if self.next >= end:
                return
            # The log's frames as the writer laid them out, one message per group commit at the
            # log's end (the steady state) or per CHUNK_BYTES when behind: one copy out of the
            # mapping (the view ends with this call: retention may close it), no work per record
            # here at the end, a walk over the frames' lengths when behind. Only to a standby
            # that asked (``wire``): one of an earlier build reads records messages alone.
            if (self.frames and at.offset == self.next and frames_span(w, r._views, at, CHUNK_BYTES, sp)
                    and sp.end > sp.start):  # fmt: skip
                mv = sp.mv
                assert mv is not None
                sp.mv = None
                stop = sp.stop
                self._write(encode_span(self.next, sp.base, mv, sp.start, sp.end))
                mv = None  # (the mapping: no reference kept past the message)
                at.base, at.pos, at.offset = sp.base, sp.end, stop
                self.next = stop
                self._sent_frames += 1
                if stop >= end:
                    return  # all the log holds now (the next write calls again)
                continue
            sp.mv = None
            payloads: list[memoryview] = []
            size = 0
            expect = self.next
            for f in r.log.read(self.next, min(end, self.next + CHUNK_RECORDS), resume=self._pos):
                if f.offset != expect:
                    self.drop(f"offset {expect} was removed by retention; the standby must copy a snapshot")
                    return
                p = f.payload
                payloads.append(p)
                size += len(p)
                expect += 1
                if size >= CHUNK_BYTES:
                    break
            if not payloads:
                self.drop(f"offset {self.next} is not readable; the standby must copy a snapshot")
                return
            # (where the frames' bytes cannot be taken as they are: the position is not known yet)
            t.write(b"".join(wire.encode_records(self.next, payloads)))
            self.next = expect
            self._sent_records += 1

    def _send_snapshot(self) -> None:
        for path in list_snapshots(self.replicas.snap_dir):
            try:
                header = read_header(path)
                fd = os.open(path, os.O_RDONLY)
            except (OSError, ValueError):
                continue  # incomplete, or removed by a newer one meanwhile
            self._snap_fd = fd
            size = os.fstat(fd).st_size
            st = self.replicas.role.state
            self._reply(wire.encode_snapshot(header.start_offset, size, st.epoch, st.history), close=False)
            self._copy_snapshot()
            return
        self._reply(b"SNAPSHOT_NEEDED\r\n")  # no snapshot yet: the log still starts at 0

    def _copy_snapshot(self) -> None:
        t = self.transport
        assert t is not None
        while self._snap_fd >= 0 and not self.paused:
            chunk = os.read(self._snap_fd, CHUNK_BYTES)
            if not chunk:
                os.close(self._snap_fd)
                self._snap_fd = -1
                t.close()
                return
            t.write(chunk)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._snap_fd >= 0:
            self._copy_snapshot()
        else:
            self.pump()

    def drop(self, why: str) -> None:
        """End this stream, saying why (the standby reconnects if it can)."""
        log.warning("standby %s: %s; closing its stream", self.peer, why)
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fd = -1  # (the transport closed it: its number may be reused)
        if self._snap_fd >= 0:
            os.close(self._snap_fd)
            self._snap_fd = -1
        self._pos = ReadPos(-1, 0, 0)  # where the last read stopped: no segment rescan per batch
        if self.streaming:
            log.info("standby %s disconnected%s", self.peer, f": {exc}" if exc else "")
        self.streaming = False
        self.replicas.lost(self)
