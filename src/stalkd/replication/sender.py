"""The primary's side of replication: one stream per standby, read back from its own log.

A connection whose first line is a replication request (``wire``) is handed here by the
listener (``Replicas.take_over``). The stream is read from the log's segments (what is written
is in the page cache), so a standby that is behind and one that is current take the same path,
and nothing is buffered per standby beyond what its socket holds: while the transport's buffer
is above its limit the sender stops reading the log.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from stalkd.engine.snapshot import list_snapshots, read_header
from stalkd.log.reader import ReadPos
from stalkd.replication import wire
from stalkd.replication.epochs import diverged_at
from stalkd.replication.gate import SyncGate
from stalkd.replication.role import Role

if TYPE_CHECKING:
    from stalkd.log import Log

__all__ = ["Replicas", "Sender"]

log = logging.getLogger("stalkd.replication")

CHUNK_BYTES = 1 << 20  # payload bytes per records message
CHUNK_RECORDS = 8192
_WRITE_LIMIT = 4 << 20  # transport buffer above which the sender pauses


class Replicas:
    """The standbys of this primary.

    ``on_replicated`` is called when the gate moved (the server releases held replies);
    ``may_replicate(identity)`` is the ACL check (None: everyone may)."""

    def __init__(self, log_: Log, snap_dir: str, role: Role, sync_standbys: int,
                 on_replicated: Callable[[], None]) -> None:  # fmt: skip
        self.log = log_
        self.snap_dir = snap_dir
        self.role = role
        self.gate = SyncGate(sync_standbys) if sync_standbys else None
        self.on_replicated = on_replicated
        self.senders: set[Sender] = set()

    def take_over(self, transport: asyncio.BaseTransport, data: bytes, allowed: bool) -> None:
        """A listener's connection whose first bytes ``data`` start a replication request;
        ``allowed``: the listener's ACL (if any) lets this identity replicate."""
        s = Sender(self, allowed, None)
        transport.set_protocol(s)
        s.connection_made(transport)
        s.data_received(data)

    def written(self) -> None:
        """New records were written to the log: stream them."""
        for s in list(self.senders):
            s.pump()

    def acked(self, s: Sender, offset: int) -> None:
        if self.gate is not None:
            before = self.gate.replicated
            self.gate.ack(s, offset)
            if self.gate.replicated != before:
                self.on_replicated()

    def lost(self, s: Sender) -> None:
        self.senders.discard(s)
        if self.gate is not None:
            self.gate.drop(s)

    def hold(self) -> int | None:
        """The lowest offset a connected standby still needs (None: no standby). Called by
        retention, possibly on the snapshot thread: the set is copied in one C call first."""
        needs = [s.acked for s in tuple(self.senders)]
        return min(needs) if needs else None

    def lags(self) -> list[tuple[str, int]]:
        """``(peer, records not yet acknowledged)`` per connected standby."""
        end = self.log.next_offset
        return sorted((s.peer, end - s.acked) for s in self.senders)

    def close(self) -> None:
        for s in list(self.senders):
            s.close()


class Sender(asyncio.Protocol):
    """One standby's connection, after the listener handed it over."""

    def __init__(self, replicas: Replicas, allowed: bool, identity: str | None) -> None:
        self.replicas = replicas
        self.allowed = allowed
        self.identity = identity
        self.transport: asyncio.WriteTransport | None = None
        self.peer = "?"
        self._line = b""
        self._acks = wire.AckDecoder()
        self.streaming = False
        self.paused = False
        self.next = 0  # next offset to send
        self.acked = 0  # the standby's durable end
        self._snap_fd = -1
        self._pos = ReadPos(-1, 0, 0)  # where the last read stopped: no segment rescan per batch

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)
        self.transport.set_write_buffer_limits(high=_WRITE_LIMIT)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "unix")

    def data_received(self, data: bytes) -> None:
        if self.streaming:
            try:
                ack = self._acks.feed(data)
            except wire.WireError as e:
                self._end(str(e))
                return
            if ack is not None and ack > self.next:
                self._end(f"acknowledged offset {ack}, beyond the {self.next} it was sent")
                return
            if ack is not None and ack > self.acked:
                self.acked = ack
                self.replicas.acked(self, ack)
            return
        if self.transport is None or self.transport.is_closing():
            return
        self._line += data
        end = self._line.find(b"\r\n")
        if end < 0:
            if len(self._line) > wire.MAX_LINE:
                self._end("request line too long")
            return
        line, rest = self._line[:end + 2], self._line[end + 2:]
        self._line = b""
        self._request(line)
        if rest and self.streaming:
            self.data_received(rest)

    def _reply(self, line: bytes, close: bool = True) -> None:
        assert self.transport is not None
        self.transport.write(line)
        if close:
            self.transport.close()

    def _request(self, line: bytes) -> None:
        if not self.allowed:
            self._reply(b"PERMISSION_DENIED\r\n")
            return
        try:
            req = wire.parse_request(line)
        except wire.WireError as e:
            self._end(str(e))
            return
        role = self.replicas.role
        if req is not None:
            role.saw(req[1])
        if role.refuses():  # a standby's or a fenced primary's copy is nobody's to follow
            self._reply(b"NOT_PRIMARY\r\n")
            return
        if req is None:
            self._send_snapshot()
            return
        offset, epoch = req
        lg = self.replicas.log
        cut = diverged_at(role.state, lg.next_offset, epoch, offset)
        if cut is not None:
            self._reply(b"DIVERGED %d\r\n" % cut)
            return
        bounds = lg.segment_bounds()
        if bounds and offset < bounds[0][0]:
            self._reply(b"SNAPSHOT_NEEDED\r\n")
            return
        self._reply(wire.encode_streaming(role.state.epoch, lg.next_offset, role.state.history), close=False)
        log.info("standby %s%s streaming from offset %d", self.peer,
                 f" ({self.identity})" if self.identity else "", offset)  # fmt: skip
        self.next = self.acked = offset
        self.streaming = True
        self.replicas.senders.add(self)
        self.replicas.acked(self, offset)  # it holds everything below ``offset`` already
        self.pump()

    def pump(self) -> None:
        """Send what the log holds past ``next``, until caught up or the socket is full."""
        t = self.transport
        if t is None or not self.streaming:
            return
        lg = self.replicas.log
        while not self.paused and not t.is_closing():
            end = lg.next_offset
            if self.next >= end:
                return
            payloads: list[memoryview] = []
            size = 0
            expect = self.next
            for f in lg.read(self.next, min(end, self.next + CHUNK_RECORDS), resume=self._pos):
                if f.offset != expect:
                    self._end(f"offset {expect} was removed by retention; the standby must copy a snapshot")
                    return
                p = f.payload
                payloads.append(p)
                size += len(p)
                expect += 1
                if size >= CHUNK_BYTES:
                    break
            if not payloads:
                self._end(f"offset {self.next} is not readable; the standby must copy a snapshot")
                return
            # One copy out of the segment's mapping per message: the views end with this call,
            # so nothing the transport keeps pins the mapping (retention may close it).
            t.write(b"".join(wire.encode_records(self.next, payloads)))
            self.next = expect

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

    def _end(self, why: str) -> None:
        log.warning("standby %s: %s; closing its stream", self.peer, why)
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._snap_fd >= 0:
            os.close(self._snap_fd)
            self._snap_fd = -1
        self._pos = ReadPos(-1, 0, 0)  # where the last read stopped: no segment rescan per batch
        if self.streaming:
            log.info("standby %s disconnected%s", self.peer, f": {exc}" if exc else "")
        self.streaming = False
        self.replicas.lost(self)
