"""One client connection: an asyncio protocol object between the socket and the server's engine.

Bytes go into a sans-I/O ``Parser``; each complete command goes to ``Server.execute``; replies
come back through :meth:`Connection.send` tagged with a durability *barrier* (the server's
write-batch number their records belong to, 0 when nothing needs to be on disk first).
This file is the one implementation: setup.py compiles it with Cython (pure-Python mode,
``stalkd.extensions.CYTHON_MODULES``), where ``Connection`` is an extension type whose state is
C fields (the ``cython.declare`` lines); uncompiled, the same file runs as plain Python.

Ensures:
- Replies leave in command order. A reply whose barrier is not yet durable is held, and every
  later reply on the connection queues behind it, even one that needs no disk.
- All replies ready after one read go out in one ``writelines`` call (one send for a pipeline).
- While a reserve blocks, the connection still reads (to see a half-close or a hang-up) but runs
  no further command: beanstalkd answers strictly in order, so they wait in the parser.
- A connection with a ``policy`` (a TLS listener with an ACL) runs only the commands it
  admits; a refused one gets ``PERMISSION_DENIED`` and changes nothing.
- Memory per connection is bounded by about ``max_output`` plus one reply and one read:
  replies ready to send are handed to the transport once they pass a quarter of ``max_output``
  (at most ``FLUSH_AT``), even in the middle of a pipeline; the transport's high-water mark is
  the rest of ``max_output``, so once replies queued here and there reach it, or the held
  replies pass ``max_output`` (a client that does not read), the connection runs no further
  command and stops reading until the client has read enough. Reads are at most a quarter of
  ``max_output`` (at most ``READ_MAX``; the loop's own reads are 256 KiB), so the input left
  unparsed when reading stops is bounded too (``readbuf.py``); a blocked connection that has buffered
  ``max_output`` of input stops reading. Replies queued for a client that is behind are
  joined into one buffer (not one object per reply, which costs more than a short reply).
- Memory across connections is the server's ``--max-memory`` (budget.py): at the end of each
  flush, a connection holding ``GRAIN`` or more (unparsed input, held replies, replies its
  transport has not sent), or already counted, reports what it holds (``measure_memory``);
  the budget may stop its reading and running what it read (``hold_reading``, apart from its own pauses)
  or close it (``shed``).
- The loop's time is shared turn by turn (turns.py, the host's ``turns``): a connection runs at
  least one command each time it runs, and past the turn's deadline it stops reading, runs
  nothing more and waits in the queue (``deferred``) until a later turn runs it
  (``run_deferred``); so one client's pipeline holds the loop about one turn's budget, not
  for all it sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
    from stalkd.protocol.parser import Item
    from stalkd.protocol.parser import Parser as ParserType
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from stalkd.protocol import NEED_DATA, Parser, encode_line, encode_reply_parts
from stalkd.protocol.accel import speedups
from stalkd.protocol.commands import AnyReply, Close, Command, Reply
from stalkd.replication.wire import REPLICATE
from stalkd.server.barriers import Barriers, HeldReplies
from stalkd.server.budget import GRAIN
from stalkd.server.turns import Turns

__all__ = ["Connection", "CommandPolicy", "Host", "FLUSH_AT", "READ_MAX", "read_size"]

log = logging.getLogger("stalkd.server")
_DENIED = Reply("PERMISSION_DENIED")

FLUSH_AT = 64 * 1024
"""Reply bytes ready to send after which they go to the transport before the next command:
a pipeline of small replies still leaves in one write, a reply flood meets the output limit."""

READ_MAX = 256 * 1024
"""Largest read (what asyncio and uvloop read at once); a connection reads at most a quarter
of its ``max_output``, so what it has read and not yet run stays within its budget."""

# GRAIN as a C constant: flush compares with it as C integers, not as Python ints.
_GRAIN = cython.declare(cython.Py_ssize_t, GRAIN)


_c_parser_type: object = None


def _load_buffered_c() -> None:
    """Compiled, with the C parser: its ``buffered`` as a C function (connection.pxd), read
    three or four times a command (a Python attribute and an int object cost ~150 instructions
    each time), and its ``next`` and ``feed`` (a bound method's call, once or twice a command)."""
    global _c_buffered, _c_next, _c_feed, _c_parser_type
    if not cython.compiled or speedups is None:
        return
    name = b"stalkd.protocol._speedups.buffered_c"
    next_name = b"stalkd.protocol._speedups.next_c"
    feed_name = b"stalkd.protocol._speedups.feed_c"
    cap = getattr(speedups, "buffered_c", None)
    next_cap = getattr(speedups, "next_c", None)
    feed_cap = getattr(speedups, "feed_c", None)
    if (cap is not None and PyCapsule_IsValid(cap, name) and next_cap is not None
            and PyCapsule_IsValid(next_cap, next_name) and feed_cap is not None
            and PyCapsule_IsValid(feed_cap, feed_name)):  # fmt: skip
        _c_buffered = cython.cast(_buffered_fn, PyCapsule_GetPointer(cap, name))
        _c_next = cython.cast(_next_fn, PyCapsule_GetPointer(next_cap, next_name))
        _c_feed = cython.cast(_feed_fn, PyCapsule_GetPointer(feed_cap, feed_name))
        _c_parser_type = speedups.Parser


if not cython.compiled:  # compiled, connection.pxd takes these from C
    _c_buffered: Any = None
    _c_next: Any = None
    _c_feed: Any = None
    _buffered_fn = _next_fn = _feed_fn = object

    def PyCapsule_IsValid(cap: object, name: bytes) -> bool:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")

    def PyCapsule_GetPointer(cap: object, name: bytes) -> Any:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")


_load_buffered_c()


@cython.locals(n=cython.Py_ssize_t)
def _buffered(parser: ParserType) -> int:
    """``parser.buffered``: a C call for the C parser (compiled)."""
    if cython.compiled and _c_buffered is not cython.NULL and type(parser) is _c_parser_type:
        n: int = _c_buffered(parser)
        return n
    return parser.buffered


def read_size(max_output: int) -> int:
    """The most a connection with this ``max_output`` reads at once."""
    return min(READ_MAX, max(4096, max(1, max_output // 4)))


class CommandPolicy(Protocol):
    """Decides, command by command, what one connection may run (``stalkd.server.acl``)."""

    def admits(self, cmd: object) -> bool: ...
    def may_replicate(self) -> bool: ...
    def shows(self, tube: str) -> bool: ...


@cython.cclass
class Host:
    """What a connection needs from the server it belongs to: the base of
    ``stalkd.server.app.Server``, the one host (a class rather than a protocol so that, compiled,
    each command a connection runs reaches ``execute`` as a C call: connection.pxd)."""

    barriers: Barriers  # told of steps and held replies, asked how far the WAL is durable

    def execute(self, c: Connection, cmd: Command) -> None:
        """Run one parsed command for ``c``; its replies come back through ``c.send``."""
        raise NotImplementedError

    def loop(self) -> asyncio.AbstractEventLoop:
        raise NotImplementedError

    def connected(self, c: Connection) -> None:
        raise NotImplementedError

    def half_closed(self, c: Connection) -> None:
        raise NotImplementedError

    def retire(self, c: Connection) -> None:
        raise NotImplementedError

    def disconnected(self, c: Connection, exc: Exception | None) -> None:
        raise NotImplementedError

    def replicate(self, c: Connection, data: bytes) -> bool:
        raise NotImplementedError

    def account(self, c: Connection, inp: int, out: int) -> None:
        raise NotImplementedError


@cython.cclass
class Connection(HeldReplies):
    """The protocol object asyncio creates per accepted socket (``Server.new_connection``).
    The barriers hold it as ``HeldReplies`` while it has replies waiting for a batch.

    Example (what the server does with it)::

        loop.create_server(server.new_connection, sock=listener)
    """

    # The state: C fields when compiled, with the C methods, declared in connection.pxd (readable and
    # writable from Python as attributes).
    server: Host
    barriers: Barriers
    id: int
    parser: ParserType
    _next: Callable[[], Item]
    _c_parser: bool
    max_output: int
    flush_at: int
    read_size: int
    transport: asyncio.Transport | None
    _bound_to: object  # the transport whose write and is_closing are bound below
    _t_write: Any
    _t_is_closing: Any
    peer: str
    out: list[bytes]
    out_bytes: int
    unsent_bound: int
    holding: bool
    _first_barrier: int
    _first_parts: bytes | tuple[bytes, ...] | None
    _first_bytes: int
    held: deque[tuple[int, bytes | tuple[bytes, ...] | None, int]]
    held_bytes: int
    close_ready: bool
    waiting: bool
    write_paused: bool
    join_writes: bool
    read_paused: bool
    eof: bool
    closing: bool
    lost: bool
    _running: bool
    _flush_queued: bool
    identity: str | None
    policy: CommandPolicy | None
    admit: Callable[[Connection], CommandPolicy | None] | None
    fresh: bool
    charged: int
    mem_paused: bool
    __weakref__: object  # listeners.py keeps connections weakly

    def __init__(self, server: Host, conn_id: int, max_job_size: int, max_output: int) -> None:
        self.server = server
        # Told when a step starts and ends, asked how far the WAL is durable, told of held replies.
        self.barriers = server.barriers
        self.id = conn_id
        self.parser = parser = Parser(max_job_size=max_job_size)
        self._next = parser.next  # looked up once: called twice per command
        # compiled, the C parser's next and feed are C calls (_load_buffered_c)
        self._c_parser = cython.compiled and _c_next is not cython.NULL and type(parser) is _c_parser_type
        self.max_output = max_output
        quarter = max(1, max_output // 4)
        self.flush_at = min(FLUSH_AT, quarter)
        self.read_size = read_size(max_output)
        self.transport = None
        # The transport's write and is_closing, bound once per transport (_flush_out): a call
        # by name looks the method up and binds it each time.
        self._bound_to = None
        self._t_write = self._t_is_closing = None
        self.peer = "?"
        self.out = []  # ready to write at the end of this step
        self.out_bytes = 0
        self.unsent_bound = 0  # at least what the transport holds unsent (see flush)
        # Replies waiting for their barrier, oldest first: the first in C fields (``holding``;
        # depth 1 holds one reply at a time: no deque entry and tuple per put), the later ones
        # in ``held`` as (barrier, parts, bytes). Parts are one line (bytes) or a tuple of
        # them; ``None`` marks a close (quit) queued behind them.
        self.holding = False
        self._first_barrier = 0
        self._first_parts = None
        self._first_bytes = 0
        self.held = deque()
        self.close_ready = False  # close once ``out`` is written
        self.held_bytes = 0
        self.waiting = False  # blocked in reserve (the engine owes us a reply)
        self.write_paused = False  # the transport's buffer is above its high-water mark
        self.join_writes = False  # set in connection_made for TLS transports
        self.read_paused = False
        self.eof = False  # the client shut down its sending side
        self.closing = False  # quit, hang-up or server stop: run no more commands
        self.lost = False
        self._running = False  # re-entrancy guard for process()
        self._flush_queued = False
        self.identity = None  # the subject of a verified TLS client certificate
        self.policy = None  # None: every command runs
        # Set by the listener's factory: called once connected, returns the policy.
        self.admit = None
        self.fresh = True  # nothing read yet: the first line may be a replication request
        self.charged = 0  # bytes the server's memory budget counts for us (budget.py writes it)
        self.mem_paused = False  # the budget stopped our reading (read_paused is our own)
        # The loop's time shared turn by turn (turns.py); a host without one sets no deadline.
        self.turns: Turns | None = getattr(server, "turns", None)
        self.deferred = False  # past a turn's deadline: runs nothing until turns runs us again

    # --- asyncio callbacks ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        # Replies gathered here (up to flush_at) and in the transport share max_output.
        transport.set_write_buffer_limits(high=self.max_output - self.flush_at)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
        elif peer:
            self.peer = str(peer)
        else:
            self.peer = "unix"
        ssl_object = transport.get_extra_info("ssl_object")
        # A TLS transport seals each buffer handed to it as records of its own: a pipeline's
        # replies joined first go out as one record instead of one per reply.
        self.join_writes = ssl_object is not None
        if self.admit is not None:
            if ssl_object is not None:
                from stalkd.server.tls import identity

                self.identity = identity(ssl_object.getpeercert())
            self.policy = self.admit(self)
        self.server.connected(self)

    def data_received(self, data: bytes) -> None:
        if self.fresh:
            self.fresh = False
            # A standby's stream (stalkd.replication.wire) leaves the beanstalkd protocol here.
            if data.startswith(REPLICATE) and self.server.replicate(self, data):
                return
        if self._c_parser:
            _c_feed(self.parser, data)
        else:
            self.parser.feed(data)
        self.process()
        if self.turns is not None:
            self.turns.read(self, len(data))  # (may yield the CPU before the loop next sleeps)

    def eof_received(self) -> bool:
        self.eof = True
        self.server.half_closed(self)
        self.process()
        return True  # keep the transport open so pending replies can still be written

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._bound_to = self._t_write = self._t_is_closing = None
        self.closing = True
        self.holding = False
        self._first_parts = None
        self.held.clear()
        self.out.clear()
        self.out_bytes = 0
        self.server.disconnected(self, exc)

    def pause_writing(self) -> None:
        self.write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.process()

    # --- running commands -------------------------------------------------------------------

    def _pause_reading(self) -> None:
        if not self.read_paused and self.transport is not None and not self.lost:
            self.read_paused = True
            if not self.mem_paused:
                self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.read_paused and self.transport is not None and not self.lost and not self.eof:
            self.read_paused = False
            if not self.mem_paused:
                self.transport.resume_reading()

    @cython.locals(limit=cython.Py_ssize_t, flush_at=cython.Py_ssize_t, deadline=cython.double)
    def process(self) -> None:
        """Run buffered commands until input runs out, a reserve blocks, or output backs up."""
        if self._running or self.lost or self.deferred:
            return
        self._running = True
        barriers = self.barriers
        barriers.begin_step()
        try:
            parser = self.parser
            server = self.server
            limit = self.max_output
            flush_at = self.flush_at
            policy = self.policy  # set once, when connected
            turns = self.turns
            deadline = -1.0  # asked of turns once there is more than one command to run
            ran = False  # at least one command each time, past the deadline or not
            while not self.waiting and not self.closing:
                if self.out_bytes >= flush_at:
                    self.flush()  # the transport calls pause_writing past max_output
                if self.write_paused or self.held_bytes > limit or self.mem_paused:
                    self._pause_reading()
                    break
                if ran and turns is not None and _buffered(parser):
                    if deadline < 0:
                        deadline = turns.deadline()
                    if turns.clock() > deadline:
                        # This turn's budget is spent: the rest waits for our place in the queue.
                        self.deferred = True
                        self._pause_reading()
                        turns.defer(self)
                        break
                item = _c_next(parser) if self._c_parser else self._next()
                if item is NEED_DATA:
                    if self.eof:
                        # Nothing more will come: close after the replies, release jobs now.
                        self.send(Close(), 0)
                        self.server.retire(self)
                    break
                ran = True
                if type(item) is Reply:  # a protocol error found by the parser
                    self.send(item, 0)
                    continue
                if policy is not None and not policy.admits(item):
                    self.send(_DENIED, 0)
                    continue
                server.execute(self, item)  # type: ignore[arg-type]
            else:
                if self.waiting and _buffered(parser) > limit:
                    self._pause_reading()
            if (self.read_paused and not self.closing and not self.write_paused and not self.deferred
                    and self.held_bytes <= limit and (not self.waiting or _buffered(parser) <= limit)):
                self._resume_reading()
        finally:
            self._running = False
            barriers.end_step()
        self.flush()

    def run_deferred(self) -> None:
        """Our place in the turns' queue came: run what we read, and read again."""
        self.deferred = False
        self.process()

    @cython.locals(n=cython.Py_ssize_t)
    def send(self, reply: AnyReply | None, barrier: int) -> None:
        """Queue the reply to this connection's latest command (None: it now blocks)."""
        if reply is None:
            self.waiting = True
            return
        if type(reply) is Close:
            self.closing = True
            if self.holding:
                self._hold(barrier, None, 0)
            else:
                self.close_ready = True
            return
        try:
            if type(reply) is Reply:
                # A plain reply line (INSERTED, DELETED, ...) is the common case: one bytes
                # object, queued or held as it is. With nothing held and no barrier (an
                # in-memory server), or one already durable, it goes straight out.
                line: bytes = encode_line(reply)
                n = len(line)
                # barrier 0 (nothing to wait for) is always durable: no need to ask the barriers
                if not self.holding and (not barrier or barrier <= self.barriers.durable):
                    self.out.append(line)
                    self.out_bytes += n
                else:
                    self._hold(barrier, line, n)
                return
            parts = encode_reply_parts(reply)
        except Exception:
            # A bug (say a stats key missing): the state change stands; the client gets
            # beanstalkd's error word instead of a malformed reply, and the log says why.
            log.exception("conn %d: cannot encode %r; replying INTERNAL_ERROR", self.id, reply)
            parts = (b"INTERNAL_ERROR\r\n",)
        n = 0
        for p in parts:
            n += len(p)
        if not self.holding and (not barrier or barrier <= self.barriers.durable):
            self.out.extend(parts)
            self.out_bytes += n
        else:
            self._hold(barrier, parts, n)

    def _hold(self, barrier: int, parts: bytes | tuple[bytes, ...] | None, n: int) -> None:
        """Hold ``parts`` (``n`` bytes; None: a close) until batch ``barrier`` is durable, behind
        whatever is held already."""
        self.held_bytes += n
        if self.holding:
            self.held.append((barrier, parts, n))
            return
        self.holding = True
        self._first_barrier = barrier
        self._first_parts = parts
        self._first_bytes = n
        self.barriers.hold(self)  # (it counts us as holding until release_held leaves nothing)

    def wake(self, reply: AnyReply, barrier: int) -> None:
        """A reply the engine produced for our blocked reserve while serving someone else."""
        self.waiting = False
        self.send(reply, barrier)
        if not self._flush_queued:
            self._flush_queued = True
            # Not inline: we are inside another connection's step. Run our backlog next.
            self.server.loop().call_soon(self._after_wake)

    def _after_wake(self) -> None:
        self._flush_queued = False
        self.process()

    @cython.locals(n=cython.Py_ssize_t, durable_=cython.Py_ssize_t)
    def release_held(self, durable: int) -> bool:
        """Move held replies whose barrier is durable to the output; True if some are left."""
        durable_ = durable
        while self.holding and self._first_barrier <= durable_:
            parts = self._first_parts
            n = self._first_bytes
            held = self.held
            if held:  # the next one moves into the first place
                entry = cython.declare(tuple, held.popleft())  # (barrier, parts, bytes): compiled, C reads
                self._first_barrier = cython.cast(cython.Py_ssize_t, entry[0])
                self._first_parts = entry[1]
                self._first_bytes = cython.cast(cython.Py_ssize_t, entry[2])
            else:
                self.holding = False
                self._first_parts = None
            if parts is None:
                self.close_ready = True
                continue
            self.held_bytes -= n
            self.out_bytes += n
            if type(parts) is bytes:
                self.out.append(parts)
            else:
                self.out.extend(parts)  # type: ignore[arg-type]
        return self.holding

    def replace_held(self, parts: tuple[bytes, ...]) -> None:
        """Every held reply becomes ``parts``, due at once (a fenced primary's NOT_PRIMARY:
        nothing it held will ever be acknowledged)."""
        if not self.holding:
            return
        size = sum(len(p) for p in parts)
        closes = [self._first_parts is None] + [p is None for _, p, _ in self.held]
        self.held.clear()
        self.held_bytes = 0
        self.holding = False
        for close in closes:
            if close:
                self._hold(0, None, 0)
            else:
                self._hold(0, parts, size)

    @cython.locals(held=cython.Py_ssize_t, wrote=cython.Py_ssize_t, unsent=cython.Py_ssize_t)
    def flush(self) -> None:
        """Write everything ready in one call; honour a queued close; report what we hold to
        the memory budget when it is ``GRAIN`` or more, or was counted."""
        wrote = self.out_bytes if self.out else 0
        self._flush_out()
        held = _buffered(self.parser) + self.held_bytes
        if self.charged or held >= _GRAIN:
            self.measure_memory()
            return
        t = self.transport
        if wrote and t is not None and not self.lost:
            # What the transport has not sent yet grows only by what we write: while that bound
            # stays under GRAIN it need not be asked (~200 instructions a write). A TLS
            # transport buffers records, larger than what was written: asked every time.
            unsent = self.unsent_bound + wrote
            if unsent >= _GRAIN or self.join_writes:
                unsent = t.get_write_buffer_size()
            self.unsent_bound = unsent
            if unsent >= _GRAIN:
                self.measure_memory()

    def _flush_out(self) -> None:
        self.out_bytes = 0
        out = self.out
        if not out and not self.close_ready:
            return
        t = self.transport
        if t is None or self.lost:
            self.out = []
            return
        if t is not self._bound_to:  # a new transport (connection_made, or set by a test)
            self._t_write = t.write
            self._t_is_closing = t.is_closing
            self._bound_to = t
        if self._t_is_closing():
            self.out = []
            return
        if out:
            # Emptied before the write. A fresh list costs less than emptying this one: a list
            # emptied in place gives its array back to the allocator the slow way.
            self.out = []
            if len(out) == 1:
                self._t_write(out[0])
            # A TLS transport seals each buffer as a record of its own; a client that is behind
            # waits for its replies as one object rather than one per reply.
            elif self.join_writes or t.get_write_buffer_size():
                self._t_write(b"".join(out))
            else:
                t.writelines(out)
        if self.close_ready:
            t.close()  # sends what is buffered, then closes

    # --- the memory budget (budget.py) --------------------------------------------------------

    def measure_memory(self) -> None:
        """Report to the server what we hold now: unparsed input, and replies held, ready or
        not yet sent by the transport."""
        if self.lost:
            return
        t = self.transport
        out = 0
        if t is not None:
            out = self.unsent_bound = t.get_write_buffer_size()  # the bound, exact again
        self.server.account(self, self.parser.buffered, self.held_bytes + self.out_bytes + out)

    def hold_reading(self, on: bool) -> None:
        """The budget stops (True) or lets again (False) our reading and running what we read
        (apart from our own pauses); let again, what was read runs when the turns' queue
        reaches us (at the next loop turn without turns)."""
        if on == self.mem_paused:
            return
        self.mem_paused = on
        t = self.transport
        if t is None or self.lost:
            return
        turns = self.turns
        if not on and turns is not None:
            # The budget lets everyone it held go at once: run at the next loop turn, each would
            # run at least one command in that one turn (1,000 connections leaving 36 KB
            # list-tubes replies unread held it 50-80 ms). Queued, they share the turns'
            # budget in order. Reading stays paused until our place comes (run_deferred).
            if not self.read_paused and not self.eof:
                self.read_paused = True  # still paused by the budget: nothing to tell the transport
            if not self.deferred:
                self.deferred = True
                turns.defer(self)
            return
        if not self.read_paused and not self.eof:
            if on:
                t.pause_reading()
            else:
                t.resume_reading()
        if not on and not self._flush_queued:
            self._flush_queued = True
            self.server.loop().call_soon(self._after_wake)

    def shed(self, why: str) -> None:
        """The budget closes us (the server logged ``why``): drop what we hold at once."""
        self.refuse(abort=True)

    # --- what the server asks of a connection -------------------------------------------------

    def refuse(self, abort: bool) -> None:
        """The server will not serve this connection (over the limit, or stopping)."""
        self.closing = True
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()

    def end_wait(self) -> None:
        """The engine answered our blocked reserve (a half-close ended it)."""
        self.waiting = False

    def stop_commands(self) -> None:
        """Server stop: run no new command; replies already produced still go out."""
        self.closing = True

    def abort(self) -> None:
        """A fatal storage error, or a fence: drop held replies unsent and cut the connection
        (what it held has an unknown outcome for the client)."""
        self.closing = True
        self.holding = False
        self._first_parts = None
        self.held.clear()
        self.held_bytes = 0
        if self.transport is not None:
            self.transport.abort()

    def release(self, durable: int) -> None:
        """Batches up to ``durable`` are durable (the barriers' one call per holding connection,
        a C call when compiled): move the replies now due to the output
        (the barriers stop counting it as holding once none is left), send them, and run what
        was read if the connection had stopped (which may hold replies again)."""
        if not self.release_held(durable):
            self.barriers.unhold(self)
        self.flush()
        self.resume()  # it may have stopped on its output limit

    def resume(self) -> None:
        """Held replies left: run what was read if the connection had stopped for them."""
        if (not self.closing and not self.waiting and not self.lost
                and (self.read_paused or self.eof or _buffered(self.parser))):
            self.process()

    def unsent(self) -> bool:
        """Whether reply bytes still wait in the transport."""
        t = self.transport
        return t is not None and not self.lost and bool(t.get_write_buffer_size())

    def abort_after_flush(self) -> None:
        """Server stop: run nothing more; close once the held replies are out."""
        if self.lost:
            return
        self.send(Close(), self.barriers.written)
        self.flush()

