"""The standby's side of replication: follow the primary's log, durably, and apply it.

``Receiver.run`` keeps one stream open to the primary (reconnecting with a backoff): each read
of records is appended to the local log at the primary's offsets (``Wal.append_replicated``),
applied to the engine (``replay``, the recovery rules: a reserved job shows as ready here), made
durable (under ``always``: one fsync per read, on the loop, once its records are written and
before the last of them are applied; on a disk whose fsyncs are slow, ``FsyncPlace`` moves them
to the log's commit thread, which runs them while the records are applied and sends each
acknowledgement itself, right after the fsync, when it can: ``Receiver._thread_ack``), and
then acknowledged with the new durable end, which is what the
primary's ``--sync-standbys`` waits for. A primary whose replies wait for no standby says, at the
stream's start, how long an acknowledgement may be held back (``wire.ack_delay``): the standby
then sends the first at once and the next at most that long after the one before, so that the
primary reads one acknowledgement per few milliseconds instead of one per group commit.

Ensures:
- An acknowledged offset is durable here (fsynced under ``always``; written under the other
  policies, which is what they promise locally too).
- Each durable end is acknowledged at once, unless the primary said it may wait (then within
  its delay, at most ``wire.HEARTBEAT``, with whatever is durable by then): a synchronous
  primary, or one of a build before the delay, waits for no timer.
- Records are appended in the primary's offset order with no gap, and only once checked
  (``wire``: length and CRC; ``frames``: offsets, record format, epochs); anything else ends
  the stream before it touches the disk, and a reconnection resumes from the local log's end.
- A standby that cannot write (disk full, an I/O error) or gets a bad stream is *not in sync*
  (``problem`` says why; ``/readyz`` shows it), retries with a backoff and resumes by itself
  once the cause clears. What it has appended is applied (the copy serves what its disk holds).
- ``lag`` and ``lag_seconds`` are true: the primary's end comes with every heartbeat (and,
  during a resync, with what its copy learns: ``saw_end``), and the seconds count from the last
  moment this disk held the whole of the primary's log.
- A primary silent for ``wire.SILENT_AFTER`` seconds is taken for gone: the stream is dropped
  and opened again.
- A standby that needs a snapshot or must cut its log (``SNAPSHOT_NEEDED``/``DIVERGED``), or
  whose copy a record contradicts, does not guess: ``resync`` replaces its copy with the
  primary's (``standby.py``), and the stream resumes from the new log's end; a resync that
  could not copy is tried again after the backoff, the old copy still serving reads.
- A stream starts at this log's last record and goes on only if the primary's is the same
  (``overlap``): a primary that lost records this standby holds and wrote others in their
  place is a resync, not a second history appended to this log.
- ``stop()`` (promotion) ends the stream between two slices of it (at most ``APPLY_RECORDS``
  records each; the messages of one read that follow on are one run, sliced): every record
  appended is applied first, and nothing of the stream is appended after.
- A read of ``DEFER_RECORDS`` or more is acknowledged before it is applied, and applied once
  the loop has read the socket again: a read that came meanwhile is appended, made durable and
  acknowledged first (at most ``SETTLE_RECORDS`` wait; ``unapplied`` counts them). Whatever
  pairs the engine with the log sees both whole: a snapshot (``Wal.apply_pending``), ``stop``,
  the end of a stream, and the next message's check (the epoch the waiting records start).
  Meanwhile a client of this standby may read the engine one read behind its log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from stalkd.client._address import Address
from stalkd.client._tls import connection_kwargs
from stalkd.engine.handover import Reservations
from stalkd.engine.model import Record
from stalkd.engine.replay import ReplayError
from stalkd.engine.state import EngineState
from stalkd.log.errors import LogError
from stalkd.log.mutex import Mutex, new_mutex
from stalkd.log.ticket import Ticket
from stalkd.persist.compaction import WalError
from stalkd.replication import overlap, wire
from stalkd.replication.catchup import CatchUpError
from stalkd.replication.frames import check_payloads, epoch_after
from stalkd.replication.role import Role
from stalkd.replication.wire import encode_ack

if TYPE_CHECKING:
    from stalkd.engine.engine import Engine
    from stalkd.persist.wal import Wal

__all__ = ["FsyncPlace", "Receiver", "ResyncNeeded", "ask"]

log = logging.getLogger("stalkd.replication")

READ_BYTES = 1 << 20
RETRY_MIN, RETRY_MAX = 0.05, 2.0
SWITCH_INTERVAL = 0.0005  # seconds; see run
APPLY_RECORDS = 1024  # records checked, appended and applied between two turns of the loop
# (a read's messages that follow on are joined first: one step per read, not per message)
# A standby's fsync runs inline on its loop while it averages at most this long (seconds); a
# slower disk's goes to the log's committer thread, so the loop keeps serving meanwhile.
INLINE_FSYNC_MAX = 0.002
INLINE_RETRY = 64  # reads synced on the thread before inline is tried again (the disk may recover)
# A read of at least this many records (0: none) has its fsync on the committer thread even on
# a quick disk (when that thread may acknowledge it: ``_thread_fd``), its records applied
# meanwhile. Off: on 2 shared cores, at 128 the fsync started later than inline (the thread's
# wake-up, then the GIL back from the loop busy applying: append -> fsync 0.77 ms mean against
# 0.12) and put:64's send -> ack read took 3.09 ms against 2.57 (standby_bench --trace, same run).
THREAD_RECORDS = 0
# A read of at least this many records is applied after the next read, if one has come
# meanwhile, is appended and acknowledged (``_take``): smaller ones, as at depth 1, where the
# next comes only after the acknowledgement, are applied at once (no extra turn of the loop).
DEFER_RECORDS = 64
SETTLE_RECORDS = 4096  # records appended and not applied at most, while reads keep coming


def _joined(msgs: list[tuple[int, list[bytes]]]) -> list[tuple[int, list[bytes]]]:
    """The messages of one read, each run of them that follows on (the next one's first offset
    the end of the one before) as one: checked, appended and applied in one call (one engine
    step and one timer re-arm), not one per message. A message that does not follow stays apart
    (``check_records`` refuses it, with nothing of it written).

    >>> _joined([(3, [b"a"]), (4, [b"b", b"c"]), (9, [b"x"]), (10, [])])
    [(3, [b'a', b'b', b'c']), (9, [b'x'])]
    """
    out: list[tuple[int, list[bytes]]] = []
    first, payloads = msgs[0]
    end = first + len(payloads)
    joined: list[bytes] | None = None
    for f, p in msgs[1:]:
        if f == end:
            if joined is None:
                joined = list(payloads)
            joined.extend(p)
        else:
            out.append((first, payloads if joined is None else joined))
            first, payloads, joined = f, p, None
        end = f + len(p)
    out.append((first, payloads if joined is None else joined))
    return out


@cython.cclass
class _Feed:
    """The stream's bytes after the handshake, as its transport's protocol: ``read`` returns
    everything received since the last read, in one piece per read. ``asyncio.StreamReader``
    did the same through a dozen pure-Python calls and a buffer copied in and out again, per
    message of the primary's: at one record per message, a tenth of the standby's work.

    With a ``sink`` (the receiver, while it streams), a read that comes while the stream's task
    waits for one is handed to ``sink._read`` in the transport's own call: no future set, no
    task woken, no coroutine resumed (~10,000 instructions a message). What that leaves for the
    task (a read of more than one slice: ``Receiver._read``) ``read`` returns, as a list, and
    what it raises ``read`` raises.

    Ensures: bytes come out in the order received, none twice; at most ``limit`` bytes (plus the
    chunk that crossed it) wait unread, reading from the socket paused meanwhile; at the end of
    the stream ``read`` returns ``b""``, or raises the error that cut the connection.
    """

    def __init__(self, transport: asyncio.BaseTransport, limit: int, buffered: bytes) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._chunks: list[bytes] = []
        self._size = 0
        self._limit = limit
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._exc: BaseException | None = None
        self._paused = False
        self._sink: Receiver | None = None  # takes a read at once while the task waits (see above)
        self._held: list[tuple[int, list[bytes]]] | None = None  # what the sink left for the task
        self._error: Exception | None = None  # what the sink raised, for the task
        if buffered:
            self.data_received(buffered)

    # --- the protocol's side (called by the transport) --------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # pragma: no cover
        pass  # (set_protocol on an open transport: never called)

    def data_received(self, data: bytes) -> None:
        sink = self._sink
        w = self._waiter
        if sink is not None and w is not None and not self._chunks and not w.done():
            # The task waits for a read (none is buffered, none left for it): this one is taken now.
            try:
                held = sink._read(data)
            except Exception as e:  # the stream's end: the task raises it
                self._sink = None  # (what follows is buffered, never read)
                self._error = e
                self._wake()
                return
            if held is not None:
                self._held = held
                self._wake()
            elif sink._pending_n:  # taken, not applied: the task applies it unless more came
                self._held = []
                self._wake()
            return
        self._chunks.append(data)
        self._got(len(data))

    def _got(self, n: int) -> None:
        self._size += n
        if self._size > self._limit and not self._paused:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: BaseException | None) -> None:
        self._eof = True
        self._exc = exc
        self._wake()

    def pause_writing(self) -> None:
        pass  # acknowledgements are a few bytes each: nothing to hold back

    def resume_writing(self) -> None:
        pass

    def _wake(self) -> None:
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    # --- the receiver's side -------------------------------------------------------------------

    async def read(self) -> bytes | list[tuple[int, list[bytes]]]:
        """What came since the last read (waiting for something); ``b""`` at the end. With a
        sink: what it left of a read (a list), before what came after it."""
        if not self._chunks and not self._eof and self._held is None and self._error is None:
            self._waiter = fut = asyncio.get_running_loop().create_future()
            await fut
        err = self._error
        if err is not None:
            self._error = None
            raise err
        held = self._held
        if held is not None:
            self._held = None
            return held
        chunks = self._chunks
        if not chunks:
            if self._exc is not None:
                raise self._exc
            return b""
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._size = 0
        if self._paused:
            self._paused = False
            self._transport.resume_reading()
        return data


async def _feed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int) -> _Feed:
    """Take the stream over from ``reader`` after the handshake: what it had buffered comes
    first. (At its end, ``reader.read()`` returns that at once: no wait, so nothing received
    meanwhile can overtake it.)"""
    transport = writer.transport
    feed = _Feed(transport, limit, b"")
    transport.set_protocol(cast(asyncio.BaseProtocol, feed))
    reader.feed_eof()
    buffered = await reader.read()
    if buffered:
        feed._chunks.insert(0, buffered)
        feed._got(len(buffered))
    return feed


@cython.cclass
class FsyncPlace:
    """Where a standby's next fsync runs: inline on its loop (no thread to wake, no loop to wake
    back, per read) while the inline fsyncs average at most ``limit`` seconds; after a slower
    average, on the committer thread for ``retry`` reads, then inline once again. With ``big``
    (0: off), a read of that many records or more goes to the thread whatever the average (its
    records are applied while the thread fsyncs them; it does not count towards the retry). A
    pure core: the caller times the fsyncs.

    >>> p = FsyncPlace(limit=0.002, retry=2, big=100)
    >>> p.inline(5), p.inline(100)
    (True, False)
    >>> p.inline_done(0.010); [p.inline(5) for _ in range(3)]
    [False, False, True]
    """

    def __init__(self, limit: float = INLINE_FSYNC_MAX, retry: int = INLINE_RETRY, alpha: float = 0.25,
                 big: int = THREAD_RECORDS) -> None:  # fmt: skip
        self.limit = limit
        self.retry = retry
        self.alpha = alpha
        self.big = big
        self.avg = 0.0  # seconds, moving average of the inline fsyncs
        self._thread_left = 0

    def inline(self, records: int) -> bool:
        """Run the fsync of this read of ``records`` inline? (Each False for a slow disk counts
        one read towards the next try.)"""
        if self.big and records >= self.big:
            return False
        if self._thread_left:
            self._thread_left -= 1
            return False
        return True

    def inline_done(self, seconds: float) -> None:
        """An inline fsync took ``seconds``."""
        self.avg += self.alpha * (seconds - self.avg)
        if self.avg > self.limit:
            self._thread_left = self.retry


class ResyncNeeded(RuntimeError):
    """The primary cannot stream to this log as it is: a copy of its state is needed.
    ``since``: the offset past which this log was never the primary's (None: it is only behind)."""

    def __init__(self, why: str, since: int | None = None) -> None:
        super().__init__(why)
        self.since = since


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes,
              secret: str | None) -> wire.Reply:
    """Send ``request`` and read the primary's answer, proving ``secret`` when challenged."""
    writer.write(request)
    # asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancellation that lands in the
    # turn its read completes, and a task that outlives its cancellation (the fence, asking
    # again every second) kept a stopping server's loop from closing (the rejoin stall).
    async with asyncio.timeout(wire.SILENT_AFTER * 4):
        r = wire.parse_reply(await reader.readuntil(b"\r\n"))
    if r.word == "CHALLENGE":
        if secret is None:
            raise EOFError("the primary asks for the replication secret: give --replication-secret FILE")
        writer.write(wire.encode_auth(secret, r.args[0].encode(), request))
        async with asyncio.timeout(wire.SILENT_AFTER * 4):
            r = wire.parse_reply(await reader.readuntil(b"\r\n"))
    if r.word == "PERMISSION_DENIED":
        raise EOFError("the primary refused this standby (PERMISSION_DENIED): the same "
                       "--replication-secret on both, or an ACL identity with replicate = true")
    return r


def _thread_fd(transport: asyncio.BaseTransport) -> int:
    """A descriptor of the stream's socket of the receiver's own (a dup: the transport closing
    its socket cannot hand the number to another file while a thread may write to it), on which
    the committer thread may acknowledge; -1 if it must not (``wire.plain_fd``: a TLS stream, or
    a transport without a socket)."""
    fd = wire.plain_fd(transport)
    if fd < 0:
        return -1
    try:
        return os.dup(fd)  # (the socket's O_NONBLOCK is the dup's too: one open file)
    except OSError:
        return -1


def _send_ack_py(fd: int, data: bytes, n: int) -> int:
    """Write ``data`` to ``fd`` without waiting: the bytes written, -1 if none could be.
    (Compiled, receiver.pxd's C send, with the GIL held: ~2 us, and the thread does not wait
    for the GIL back from the busy loop after it.)"""
    try:
        return os.write(fd, data)
    except OSError:  # EAGAIN (the socket's buffer is full), or the stream is gone
        return -1


if not cython.compiled:
    _send_fd = _send_ack_py


@cython.cclass
class _Durable:
    """What a stream's reads fsynced on the log's committer thread call there, once durable
    (``GroupCommit.call_when_durable``): the acknowledgement is sent from there when it can be
    (``Receiver._thread_ack``), and the loop is handed the ticket's end and error. One per
    stream, not a closure made per read."""

    def __init__(self, loop: asyncio.AbstractEventLoop, synced: Callable[..., None],
                 writer: asyncio.WriteTransport, rc: Receiver) -> None:  # fmt: skip
        self._loop = loop
        self._synced = synced
        self._writer = writer
        self._rc = rc

    def __call__(self, t: Ticket) -> None:  # on the committer thread (here, if already durable)
        # (try, not contextlib.suppress: this runs once per fsync, and the context manager's
        # three Python calls cost more than the hand-off itself)
        tk = cython.declare(Ticket, t)  # (compiled: its C fields)
        rc = self._rc
        if tk._error is None and rc._ack_fd >= 0:  # (read unlocked: _thread_ack reads it again)
            rc._thread_ack(self._writer, tk.last + 1)
        try:  # noqa: SIM105
            self._loop.call_soon_threadsafe(self._synced, self._writer, tk.last + 1, tk._error)
        except RuntimeError:  # the loop is closed: nobody waits for it
            pass


@cython.cclass
class Receiver:
    """Compiled, an extension type (receiver.pxd): its state is C fields and its per-message
    steps C calls, reading the WAL's per-batch object (``WalBatches``: the log's writer and
    group commit) and the engine's state as C fields; as a plain class each ``self.x`` and
    ``self.f()`` was a dictionary look-up or a Python call (~1,000-1,500 instructions each, eight
    or so per message)."""

    def __init__(self, address: Address, wal: Wal, engine: Engine, role: Role, *, applied: Callable[[], None],
                 on_resync: Callable[[str], None],
                 resync: Callable[[str, int | None], Awaitable[None]],
                 secret: str | None = None, clock: Callable[[], float] = time.monotonic,
                 name: str = "", frames: bool = True, paced: bool = True) -> None:  # fmt: skip
        self.address = address
        self.secret = secret
        self.name = name  # this node's name in a --ha cluster: the primary's sync set names it
        # whether to ask for frames messages (``wire``); without, the primary sends records
        # messages alone, as to a standby of a build before them
        self.frames = frames
        # whether to offer to pace acknowledgements (``wire``); without, every durable end is
        # acknowledged at once, as by a standby of a build before the offer
        self.paced = paced
        self.clock = clock
        self.problem: str | None = "not yet streaming from the primary"  # None: in sync
        self.caught_up_at = clock()  # the last time this disk held the primary's whole log
        self.durable_end = 0  # durable here (acknowledged to the primary, or about to be: ``_acknowledge``)
        self.ack_delay = 0.0  # seconds an acknowledgement may wait (the primary's STREAMING says)
        self.acks = 0  # acknowledgements sent since start by the loop (or found sent by the thread)
        self.thread_acks = 0  # sent by the committer thread (_thread_ack)
        self.wal = wal
        self._batches = wal.batches  # (the same object through reopens: ``Wal._use_log``)
        self.engine = engine
        self.role = role
        self.applied = applied
        self.on_resync = on_resync  # fatal: the local copy can no longer be trusted
        self.resync = resync
        self.fsync = wal.durability == "always"
        self.primary_end = 0  # the primary's log end, as last known
        self.connected = False
        self.records = 0  # received since start
        self.reservations = Reservations()  # held on the primary: kept held at promotion
        self._stopped = False
        self._writer: asyncio.StreamWriter | None = None
        self._syncing = 0  # tickets of the log's not yet durable (see _sync)
        self._asked = 0  # the end of the last one
        self._acked = 0  # the last offset acknowledged on this stream
        self._acked_at = float("-inf")  # when (the loop's clock)
        self._ack_soon: asyncio.TimerHandle | None = None  # the next paced acknowledgement
        self.fsync_place = FsyncPlace()
        # This read's fsync: inline or on the thread (None: not decided yet; see _take).
        self._inline: bool | None = None
        self._epochs: tuple[tuple[int, int], ...] | None = None  # the engine's, when _epoch was taken
        self._epoch = 0  # role.state.epoch then (the role's epochs are the engine's: role.attach)
        self._durable: _Durable | None = None  # the stream's callback for its thread-path fsyncs
        # The committer thread acknowledges a durable end itself (_thread_ack), on the stream's
        # socket (_ack_fd: the receiver's dup of it, -1 when only the loop may write), when every
        # write of an acknowledgement goes through _ack_lock (both threads), the highest one sent
        # (_sent: none ever goes back) and what a thread's short write left (_rest: the next
        # write sends it first).
        self._ack_lock: Mutex = new_mutex()
        self._ack_fd = -1
        self._sent = 0
        self._rest = b""
        # The stream's, for _read (set by _stream): its decoder, when the primary was last
        # heard, our last record until the first message matched it, the transport acknowledged
        # to, heartbeats answered.
        self._dec = wire.RecordDecoder()
        self._heard = [0.0]
        self._last: bytes | None = None
        self._out: asyncio.WriteTransport | None = None
        self._beats = 0
        # Records appended but not yet applied (``_take``, ``settle``), and how many.
        self._pending: list[list[Record | bytes]] = []
        self._pending_n = 0
        wal.apply_pending = self.settle

    @property
    def lag(self) -> int:
        """Records the primary had written that this standby does not hold (as last known)."""
        return max(0, self.primary_end - self._batches.writer.next)

    def saw_end(self, end: int) -> None:
        """The primary's log reaches ``end`` at least (learned outside the stream: a resync's
        copy). Without it a resyncing standby would report the lag it had when it was cut off,
        0 if it was current then, while it copies the primary's whole snapshot."""
        if end > self.primary_end:
            self.primary_end = end

    @property
    def lag_seconds(self) -> float:
        """Seconds since this standby last held the primary's whole log (0: it does now)."""
        if self.connected and self.problem is None and self.lag == 0:
            return 0.0
        return self.clock() - self.caught_up_at

    def _fail(self, why: str) -> None:
        if why != self.problem:
            self.problem = why

    def stop(self) -> None:
        self._stopped = True
        try:
            self.settle()  # (a promotion's EPOCH record follows every record appended)
        except ReplayError as e:  # the stream's task would have resynced; a promotion cannot
            self._fail(f"a record the primary sent contradicts this copy: {e}")
            log.error("replication from %s stopped: %s", self.address, self.problem)
        self._end_thread_acks()  # (the committer thread sends nothing after this)
        if self._writer is not None:
            self._writer.close()

    @property
    def syncing(self) -> bool:
        """A group-commit fsync of the local log is asked for or running on its thread."""
        return self._syncing > 0

    async def run(self) -> None:
        # When an fsync returns, its thread must win the GIL back from the loop thread, busy
        # checking and applying the next records; the default 5 ms switch interval would add up
        # to 5 ms to every acknowledgement a synchronous primary waits for (as on the primary).
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        delay = RETRY_MIN
        while not self._stopped:
            try:
                try:
                    await self._session()
                finally:
                    self.connected = False
                    if self._writer is not None:
                        self._writer.close()
                        self._writer = None
                delay = RETRY_MIN
            except (ResyncNeeded, ReplayError) as e:
                # ReplayError: a record contradicts this copy; carrying on would serve a lie.
                self._pending = []  # (the copy they were appended to is replaced)
                self._pending_n = 0
                if self._stopped:
                    return
                self._fail(f"resyncing: {e}")
                try:
                    await self.resync(str(e), e.since if isinstance(e, ResyncNeeded) else None)
                    self.reservations = Reservations()  # the new copy's records say the rest
                    delay = RETRY_MIN
                    continue
                except (OSError, ValueError, CatchUpError) as err:  # the old copy is intact
                    if not self._stopped:
                        self._fail(f"resync failed: {err}")
                        log.warning("replication from %s: resync failed: %s; retrying in %.2f s",
                                    self.address, err, delay)  # fmt: skip
            except (TimeoutError, OSError, EOFError, ValueError, WalError, LogError, asyncio.IncompleteReadError) as e:  # fmt: skip
                # (a reconnection resumes from the local log's end, whatever was cut short)
                if not self._stopped:
                    why = str(e) or f"{type(e).__name__} (no answer)"
                    self._fail(f"{'cannot write: ' if isinstance(e, (LogError, WalError)) else ''}{why}")
                    log.warning("replication from %s: not in sync: %s; retrying in %.2f s", self.address,
                                self.problem, delay)  # fmt: skip
            if self._stopped:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        a = self.address
        if a.path is not None:
            return await asyncio.open_unix_connection(a.path, limit=wire.MAX_LINE * 4)
        return await asyncio.open_connection(a.host, a.port, **connection_kwargs(a))

    async def _ask(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, wire.Reply, bytes | None]:
        """Open a stream and ask for the records from this log's last one on (``overlap``: the
        last record's payload is returned, for the stream's first message to match), or from
        its end when the primary keeps no record that old (a snapshot right at our end, as a
        clean stop takes)."""
        lg = self.wal.log
        st = self.role.state
        last = overlap.last_record(lg)
        while True:
            async with asyncio.timeout(wire.SILENT_AFTER * 4):  # (not wait_for: see ask)
                reader, writer = await self._open()
            self._writer = writer
            at = overlap.request_offset(lg.next_offset, last)
            request = wire.encode_request(at, st.epoch, st.history, self.name, frames=self.frames,
                                          paced=self.frames and self.paced)  # fmt: skip
            r = await ask(reader, writer, request, self.secret)
            if r.word != "SNAPSHOT_NEEDED" or last is None:
                return reader, writer, r, last
            writer.close()
            last = None

    async def _session(self) -> None:
        reader, writer, r, last = await self._ask()
        lg = self.wal.log
        if r.word in ("SNAPSHOT_NEEDED", "DIVERGED"):
            raise ResyncNeeded(f"the primary {self.address} answered {r.word} {' '.join(r.args)}".rstrip(),
                               int(r.args[0]) if r.word == "DIVERGED" else None)
        if r.word != "STREAMING":
            raise EOFError(f"the primary answered {r.word}")
        epoch = int(r.args[0])  # the EPOCH records themselves come with the stream
        self.primary_end = int(r.args[1])
        self.ack_delay = wire.ack_delay(r)
        try:
            overlap.check_end(lg.next_offset, self.primary_end)
        except overlap.Diverged as e:
            raise ResyncNeeded(f"{self.address}: {e}", e.since) from None
        self.connected = True
        self.durable_end = self._acked = lg.next_offset
        self._acked_at = float("-inf")
        log.info("streaming from %s (epoch %d) at offset %d, %d records behind%s",
                 self.address, epoch, lg.next_offset, self.lag,
                 f"; acknowledging at most every {self.ack_delay * 1000:g} ms" if self.ack_delay else "")  # fmt: skip
        dec = wire.RecordDecoder()
        self._asked = 0
        heard = [self.clock()]
        watchdog = asyncio.get_running_loop().create_task(self._watch(heard, writer))
        try:
            await self._stream(await _feed(reader, writer, READ_BYTES), writer, dec, heard, last)
        except (OSError, EOFError):
            if heard[0] >= 0:
                raise
        finally:
            watchdog.cancel()
            if self._ack_soon is not None:
                self._ack_soon.cancel()
                self._ack_soon = None
        if heard[0] < 0:
            raise EOFError(f"nothing heard from the primary for {wire.SILENT_AFTER} s (the network "
                           "or the primary is down)")

    async def _watch(self, heard: list[float], writer: asyncio.StreamWriter) -> None:
        """Cut a stream the primary has been silent on for ``wire.SILENT_AFTER`` s (a timer per
        stream, not per read: the stream's reads stay one call each)."""
        while True:
            await asyncio.sleep(wire.HEARTBEAT)
            if self.clock() - heard[0] > wire.SILENT_AFTER:
                heard[0] = -1.0
                writer.transport.abort()
                return

    async def _stream(self, feed: _Feed, writer: asyncio.StreamWriter, dec: wire.RecordDecoder,
                      heard: list[float], last: bytes | None = None) -> None:  # fmt: skip
        # Acknowledgements go to the transport itself (what StreamWriter.write and is_closing
        # forward to, a Python call each per acknowledgement)
        out = writer.transport
        self._dec, self._heard, self._last, self._out, self._beats = dec, heard, last, out, 0
        self._sent, self._rest = 0, b""
        if not self._stopped:
            self._ack_fd = _thread_fd(out)
        feed._sink = self  # a read that comes while this task waits is taken at once (_read)
        try:
            while not self._stopped:
                if self._pending_n:
                    # Records appended and acknowledged, not yet applied: the loop reads the
                    # socket first, and a read that came meanwhile is taken (appended, fsynced,
                    # acknowledged) before they are applied, its acknowledgement not held back
                    # by their apply (~1.6 us a record: a primary's group commit of 1,000 jobs
                    # waited 1.6 ms more for its standby).
                    await asyncio.sleep(0)
                    if self._stopped:
                        return
                    if not feed._chunks or self._pending_n >= SETTLE_RECORDS:
                        # One slice at a time: a read that comes during the next is taken
                        # before it (an apply of 4,096 records held one for ~6 ms).
                        self.settle(1)
                        if self._pending_n:
                            continue
                got = await feed.read()
                if self._stopped:  # promoted while this task waited: nothing of the stream after
                    return
                if isinstance(got, list):  # what _read left of a read the feed handed it
                    if not got:
                        continue
                    msgs = got
                else:
                    if not got:
                        raise EOFError("the primary closed the stream")
                    left = self._read(got)
                    if left is None:
                        continue
                    msgs = left
                n = len(msgs)
                for i in range(n):
                    first, payloads = msgs[i]
                    size = len(payloads)
                    for at in range(0, size, APPLY_RECORDS):
                        if i or at:
                            # Between slices (and messages that do not follow each other), the
                            # loop runs what waits: an fsync's acknowledgement goes out now, not
                            # after all of this read.
                            await asyncio.sleep(0)
                            if self._stopped:  # promoted meanwhile: its epoch starts where the log
                                return  # ends; the rest of this read is dropped, as unread bytes are
                        self._take(first + at, payloads if size <= APPLY_RECORDS else payloads[at:at + APPLY_RECORDS],
                                   out, i == n - 1 and at + APPLY_RECORDS >= size)  # fmt: skip
                self._read_done(out)
        finally:
            feed._sink = None
            self._end_thread_acks()
            self.settle()
            self._last = self._out = None

    def _read(self, data: bytes) -> list[tuple[int, list[bytes]]] | None:
        """One read's steps that need no turn of the loop: the primary heard from, its messages
        decoded, a heartbeat answered, the stream's first message matched to our last record;
        a read of one slice is then taken (appended, applied, acknowledged). Returns what is
        left for the stream's task (a read of more slices, or of messages that do not follow
        on: the loop turns between them), else None. Nothing once stopped (promoted: nothing
        of the stream is appended after)."""
        if self._stopped:
            return None
        self._heard[0] = self.clock()
        dec = self._dec
        out = self._out
        assert out is not None  # (set by _stream)
        msgs = dec.feed(data)
        if dec.heartbeats != self._beats:  # a heartbeat: the primary's end, and we answer each
            # (an idle primary's are all alike; unanswered, it drops the stream as silent)
            self._beats = dec.heartbeats
            if dec.primary_end > self.primary_end:
                self.primary_end = dec.primary_end
            self._send_ack(out, True)
            self._in_sync()
        if not msgs:
            return None
        last = self._last
        if last is not None:  # the stream's first message: our last record first
            first, payloads = msgs[0]
            try:
                msgs[0] = overlap.trim(first, payloads, self._batches.writer.next, last)
            except overlap.Diverged as e:
                raise ResyncNeeded(f"{self.address}: {e}", e.since) from None
            self._last = None
        if len(msgs) > 1:
            msgs = _joined(msgs)
        if len(msgs) > 1:
            return msgs
        first, payloads = msgs[0]
        if len(payloads) > APPLY_RECORDS:
            return msgs
        if payloads:
            self._take(first, payloads, out, True)
        self._read_done(out)
        return None

    def _read_done(self, writer: asyncio.WriteTransport) -> None:
        """A read is taken: under a policy other than ``always``, what it wrote is as durable as
        it gets here (acknowledged; ``always``'s fsync acknowledges instead)."""
        if not self.fsync:
            self.durable_end = self._batches.writer.next
            self._acknowledge(writer)
            self._in_sync()

    @cython.locals(st=EngineState)
    def _take(self, first: int, payloads: list[bytes], writer: asyncio.WriteTransport, last: bool) -> None:
        """Check, append and apply the records at ``first``; ``last``: the read's last slice.
        Under ``always``, inline (``fsync_place``): the read's appends are fsynced once, after
        its last slice is appended and before it is applied (the acknowledgement does not wait
        for that); else each slice gets a ticket, which the log's committer thread fsyncs while
        the records are applied."""
        b = self._batches
        try:
            # The epoch this log follows: the role's, recomputed only when the engine's epochs
            # change (an EPOCH record, a resync); role.state builds an EpochState per call.
            st = self.engine.state  # (compiled: its C fields)
            epochs = st.epochs
            if epochs is not self._epochs:
                self._epoch = self.role.state.epoch
                self._epochs = epochs
            # (PUTs as their payloads: applied from them, no Record built per job)
            records = check_payloads(first, payloads, b.writer.next, self._epoch)
            try:
                b.append_replicated(first, payloads)
            except BaseException:
                self._apply(first, records[:b.writer.next - first])  # what it holds
                raise
            end = first + len(payloads)  # (the log's end now: append_replicated wrote them all there)
            if self.fsync:
                inline = self._inline
                if inline is None:  # the read's first slice (its size: the thread acknowledges a big one)
                    inline = self._inline = self.fsync_place.inline(
                        len(payloads) if self._ack_fd >= 0 and not self.ack_delay else 0)
                if not inline:
                    self._sync(writer)  # fsynced while the records are applied
                elif last:
                    self._sync_inline(writer, end)
                if last:
                    self._inline = None
            if end > self.primary_end:
                self.primary_end = end
            if self._pending_n or len(records) >= DEFER_RECORDS:
                # Applied later (``settle``), after the next read if one has come meanwhile: its
                # acknowledgement then waits for no apply. The next message is checked against
                # the epoch these leave (their EPOCH records are not in the engine yet).
                self._pending.append(records)
                self._pending_n += len(records)
                self._epoch = epoch_after(records, self._epoch)
                return
            # (_apply, without the call: once per slice)
            self.reservations.follow(self.engine, records)
            self.records += len(records)
        finally:
            st = self.engine.state
            b.last_seq = st.seq  # (``Wal.last_seq``)
            if self.reservations.tick_due:  # (a step only when a timer or waiter may need one)
                self.applied()

    @property
    def unapplied(self) -> int:
        """Records appended (and acknowledged, once durable) but not yet applied: ``settle``."""
        return self._pending_n

    @cython.locals(st=EngineState, n=cython.Py_ssize_t)
    def settle(self, slices: int = -1) -> None:
        """Apply the records appended and not yet applied, in offset order: the first
        ``slices`` slices of them (each at most ``APPLY_RECORDS``), or all (-1). The stream's
        task does, a slice per turn of the loop once no read waits (or ``SETTLE_RECORDS`` do);
        all of them: the log before a snapshot starts (``Wal.apply_pending``: its offset must be
        the engine's), ``stop`` before a promotion writes anything, the stream's end. A record
        that contradicts this copy raises ``ReplayError`` (a resync), what follows it dropped
        with the copy."""
        if not self._pending_n:
            return
        pending = self._pending
        n = len(pending) if slices < 0 or slices >= len(pending) else slices
        self._pending = pending[n:]
        try:
            for records in pending[:n]:
                self._pending_n -= len(records)
                self.reservations.follow(self.engine, records)
                self.records += len(records)
        except BaseException:
            self._pending = []  # (a ReplayError: what follows goes with the copy)
            self._pending_n = 0
            raise
        finally:
            st = self.engine.state
            self._batches.last_seq = st.seq  # (``Wal.last_seq``)
            if self.reservations.tick_due:
                self.applied()

    def _in_sync(self) -> None:
        """Whether this disk now holds the primary's whole log (as last heard)."""
        if self.durable_end >= self.primary_end:
            self.caught_up_at = self.clock()
            if self.problem is not None:
                log.info("replication from %s: in sync again at offset %d", self.address, self.durable_end)
                self.problem = None

    def _sync(self, writer: asyncio.WriteTransport) -> None:
        """Group commit, as on a primary: a ticket of the log's for everything written, which
        its committer thread fsyncs (one fsync for every ticket then waiting; those that come
        meanwhile, the next, started as soon as it returns: no thread hand-off per fsync and
        no wait for the loop thread, busy checking and applying records); each ticket's end is
        acknowledged from the loop."""
        b = self._batches
        end = b.writer.next
        if end <= self._asked:
            return
        self._asked = end
        self._syncing += 1
        d = self._durable
        if d is None or d._writer is not writer:  # the stream's first
            d = self._durable = _Durable(asyncio.get_running_loop(), self._synced, writer, self)
        b.commit.call_when_durable(end, d)  # (``Log.ticket`` and its callback, in one step)

    def _sync_inline(self, writer: asyncio.WriteTransport, end: int) -> None:
        """Fsync what this read appended (the log up to ``end`` at least), on the loop thread,
        and acknowledge it. The loop is
        held for the fsync, but what arrives meanwhile is read at once after it and shares the
        next one, as it would have waited for a committer busy with this one; and there is no
        thread to wake and no loop to wake back per message (on two busy cores each wake-up
        waits for a CPU)."""
        exc: BaseException | None = None
        t0 = perf_counter()
        try:
            self._batches.sync()  # (``Wal.sync``)
        except (LogError, OSError) as e:
            exc = e
        self.fsync_place.inline_done(perf_counter() - t0)
        self._synced(writer, end, exc, False)

    def _synced(self, writer: asyncio.WriteTransport, end: int, exc: BaseException | None,
                ticket: bool = True) -> None:  # fmt: skip
        if ticket:
            self._syncing -= 1
        if exc is not None:
            self.on_resync(f"the standby's WAL fsync failed: {exc}")
            self.stop()
            return
        # One fsync resolves every ticket waiting: the first to get here acknowledges them all.
        durable = self._batches.commit.durable  # (``Log.durable_offset``)
        if durable > end:
            end = durable
        if end <= self.durable_end or writer.is_closing():
            return
        self.durable_end = end
        if self.ack_delay:
            self._acknowledge(writer)
        else:  # a reply may wait for it (_acknowledge's first case, without the call)
            self._send_ack(writer, False)
        if end >= self.primary_end:
            self._in_sync()

    def _acknowledge(self, writer: asyncio.WriteTransport) -> None:
        """The durable end moved: tell the primary now, or (paced) once ``ack_delay`` has passed
        since the last acknowledgement, with the durable end as it is then."""
        if not self.ack_delay:  # a reply may wait for it
            self._send_ack(writer, False)
            return
        if self._ack_soon is not None:
            return  # the one due covers this
        loop = asyncio.get_running_loop()
        wait = self._acked_at + self.ack_delay - loop.time()
        if wait <= 0:
            self._send_ack(writer, False)
        else:
            self._ack_soon = loop.call_later(wait, self._ack_due, writer)

    def _ack_due(self, writer: asyncio.WriteTransport) -> None:
        self._ack_soon = None
        if self.durable_end > self._acked and not writer.is_closing():
            self._send_ack(writer, False)

    def _send_ack(self, writer: asyncio.WriteTransport, answer: bool) -> None:
        """Acknowledge the durable end (on the loop); ``answer``: a heartbeat's answer, sent even
        if the committer thread has acknowledged that much already."""
        end = self.durable_end
        if self._ack_fd < 0:  # the loop alone writes to this stream
            self._acked = end
            writer.write(encode_ack(end))  # (compiled: a C call, receiver.pxd)
        else:
            lock = self._ack_lock
            lock.acquire()  # (not ``with``: compiled, C calls; see log/mutex.py)
            try:
                sent = self._sent
                rest = self._rest
                if end < sent:  # the thread acknowledged more meanwhile: never go back
                    end = sent
                self._acked = end
                if end > sent or answer or rest:
                    self._sent = end
                    if rest:
                        self._rest = b""
                        writer.write(rest + encode_ack(end))
                    else:
                        writer.write(encode_ack(end))
            finally:
                lock.release()
        self.acks += 1
        if self.ack_delay:
            self._acked_at = asyncio.get_running_loop().time()

    def _thread_ack(self, writer: asyncio.WriteTransport, end: int) -> None:
        """Acknowledge ``end`` (durable: a ticket's) from the committer thread, right after the
        fsync, without waiting for the loop (busy applying records): only to a primary that
        waits for it (``ack_delay`` 0), on the stream the ticket was asked on while it is open,
        and only when nothing of the transport's is left to write (else the acknowledgement
        could overtake it; the loop acknowledges instead, as it does anyway in ``_synced``).
        Under ``_ack_lock``: the transport's buffer grows only under it (``_send_ack``), and
        ``stop`` closes ``_ack_fd`` under it."""
        if self.ack_delay:
            return
        lock = self._ack_lock
        lock.acquire()
        try:
            fd = self._ack_fd
            if fd < 0 or self._stopped or writer is not self._out or self._rest:
                return
            durable = self._batches.commit.durable  # (only grows: every offset below it fsynced)
            if durable > end:
                end = durable
            if end <= self._sent or writer.is_closing() or writer.get_write_buffer_size():
                return
            data = encode_ack(end)
            n = _send_fd(fd, data, 8)
            if n <= 0:  # the socket's buffer is full, or the stream is gone: the loop's turn
                return
            self._sent = end
            if n < 8:  # (the next write sends the rest first: _send_ack)
                self._rest = data[n:]
            self.thread_acks += 1
        finally:
            lock.release()

    def _end_thread_acks(self) -> None:
        """The stream ends (or the receiver stops): the committer thread acknowledges no more
        on it, and the receiver's descriptor of its socket is closed."""
        if self._ack_fd < 0:
            return
        lock = self._ack_lock
        lock.acquire()
        try:
            fd = self._ack_fd
            self._ack_fd = -1
            if fd >= 0:
                os.close(fd)
        finally:
            lock.release()

    def _apply(self, first: int, records: list[Record | bytes]) -> None:
        """Apply appended records to the engine, on the loop thread, between client commands."""
        self.reservations.follow(self.engine, records)
        self.records += len(records)
        end = first + len(records)
        if end > self.primary_end:
            self.primary_end = end
