"""The server: one engine on the event loop, connections around it, group commit beside it.

``Server.execute`` runs one command through the engine, queues its records, and tags the
replies with a *barrier*: the number of the batch their records belong to. The records of one
loop iteration form one batch, written to the WAL with one call at the start of the next
iteration (one ``write(2)`` for a whole pipeline). With ``never``/``every:<ms>`` the batch's
replies go out right after that write; with ``always`` one ``storage.sync()`` for the batch
runs on the sync thread (``Syncer``) while the loop keeps reading and running commands, and
when it returns every reply held behind the batch is released. Only one sync runs at a time,
so batches grow with load (group commit).

Deliberate exception: when one connection alone has written the last ``INLINE_AFTER`` batches,
its batch is written at the end of its step and fsynced inline on the loop thread. That client
waits for the fsync and nobody else is writing, so the thread hand-off would only add latency
(measured, bench/server_bench.py ``--peer-src`` A/B, same run: 1 conn depth 1 1.47x and depth
64 1.11x the jobs/s with the fsync inline). Readers on other connections wait at most one
fsync; a second writer ends it at once.

Second exception, for several writers: ``SyncPolicy`` (syncpolicy.py) measures the thread's
hand-off and the fsync, and runs the fsync inline while it costs no more than the hand-off and
at most 1 ms, so readers wait at most about one such fsync. A slow or stalling disk stays on
the thread, and one sync in 65 runs there to re-measure the hand-off. On this 2-core machine
with the load generator beside the server, the hand-off (266 us median) cost more than the
fdatasync (268 us with it, disk busy 35%): 16 conns depth 1 put 2.02x, others 1.24-1.42x
(A/B ``--peer-src``, same run).

Ensures:
- A reply produced by an outcome with DURABLE_OPS records (its own reply and its wakeups) is
  sent only after those records are durable under the policy: fsynced for ``always``, written
  to the kernel for ``never`` / ``every:<ms>`` (those survive ``kill -9``).
- A job body is never shown (RESERVED/FOUND) before the job's own records (its put, and any
  release, bury or kick of it) are durable, so nobody can act on a job whose put or state
  change could still vanish in a crash. Other connections' unsynced writes do not hold it
  back (with 16 conns reserving and deleting, that cost every RESERVED a second fsync wait).
- An fsync failure is fatal: nothing held is ever sent, the server logs it and exits non-zero.
- A full disk refuses changes, never reads: WAL room for a command's records is promised
  (``Storage.admit``) before the engine applies it, so a refused put/bury/delayed release/kick
  changed nothing, and a delete always has room (its put promised it). A release to ready is
  never refused: without room its record is left out, as beanstalkd never logs it. A snapshot that fails for lack
  of space is retried later with a warning; the WAL and the previous snapshot are intact.
- Timers: the engine's next deadline is always scheduled (a single loop timer).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from stalkd.engine import Engine, Outcome
from stalkd.engine import commands as C
from stalkd.engine.commands import Command, JobReply, Reply, YamlDict
from stalkd.engine.model import DURABLE_OPS, Op, Record
from stalkd.server.config import BEANSTALKD_VERSION, Config
from stalkd.server.conn import Connection
from stalkd.server.syncer import Syncer
from stalkd.server.syncpolicy import SyncPolicy

__all__ = ["Server", "Storage", "FatalStorageError"]

log = logging.getLogger("stalkd.server")

_BINLOG_KEYS = (
    "binlog-oldest-index", "binlog-current-index", "binlog-records-migrated",
    "binlog-records-written", "binlog-max-size",
)  # fmt: skip
SWITCH_INTERVAL = 0.0005  # seconds; see _start_sync
SPACE_RETRY = 5.0  # seconds between snapshot attempts while the disk is full
# Commands that may write one short durable record (bury, release, kick-job): room is promised first.
_ONE_RECORD = frozenset({C.Bury, C.Release, C.KickJob})
_OUT_OF_MEMORY, _NOT_FOUND, _KICKED_0 = Reply("OUT_OF_MEMORY"), Reply("NOT_FOUND"), Reply("KICKED", (0,))
# Batches in a row from one connection after which its fsyncs run inline (see _start_sync).
INLINE_AFTER = 8
_TIMER_SLACK = 0.001  # loop timers may fire a hair early; the engine would then do nothing


class Storage(Protocol):
    """What the server needs from the WAL (``stalkd.engine.wal.Wal`` provides it)."""

    def admit(self, cost: int) -> bool: ...
    def admit_upto(self, n: int, unit: int) -> int: ...
    def settle(self, admitted: int, records: Sequence[Record]) -> None: ...
    def write(self, records: Sequence[Record]) -> None: ...
    def sync(self) -> None: ...
    def maintain(self, engine: Engine, now: float) -> bool: ...
    def final_snapshot(self, engine: Engine) -> str | None: ...
    def stats(self) -> dict[str, int]: ...
    def close(self) -> None: ...


class FatalStorageError(RuntimeError):
    """The WAL failed to write or sync: acknowledged state can no longer be promised."""


class Server:
    """Engine + connections + group commit. Build it, then ``loop.create_server(srv.new_connection, sock=...)``.

    >>> srv = Server(Config(), Engine())   # in memory: replies never wait for a disk
    >>> srv.durable, srv.written
    (0, 0)
    """

    def __init__(
        self,
        config: Config,
        engine: Engine,
        storage: Storage | None = None,
        *,
        clock: Callable[[], float] = time.time,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.config = config
        self.engine = engine
        self.storage = storage
        self.clock = clock
        self.on_fatal = on_fatal
        self.conns: dict[int, Connection] = {}
        self._next_conn = 0
        self.started = clock()
        # Barrier bookkeeping (``always`` only): batch numbers written / known durable.
        self.group_commit = storage is not None and config.durability == "always"
        # Batch numbers: ``written`` counts loop iterations that produced durable records,
        # ``durable`` the last one on disk under the policy. A reply tagged with batch N is
        # held until ``durable >= N``.
        self.written = 0
        self.durable = 0
        self._batch_open = False  # records of this loop iteration go into batch ``written``
        self._pending: list[Record] = []  # records of this loop iteration, not yet written
        self._flush_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None  # see loop()
        self._steps = 0  # connections inside process() (nested when a release runs one)
        self._step_records = False  # a step produced records: end_step writes or schedules them
        self._releasing = False  # inside _release_held: steps it runs never write inline
        # The last connection that wrote durable records, and the last batch another one did.
        self._writer: Connection | None = None
        self._mixed = 0
        self._syncer: Syncer | None = None  # the fsync thread (``always``), started on first use
        self.sync_policy = SyncPolicy()  # several writers: fsync on the thread or inline
        self._held: set[Connection] = set()
        # Job id -> the batch holding its latest durable record, while that batch is not known
        # durable (a job is shown only after its own records are); pruned in batch order.
        self._job_batch: dict[int, int] = {}
        self._job_batches: deque[tuple[int, int]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._maint: asyncio.TimerHandle | None = None
        self.stopping = False
        self.failed: BaseException | None = None
        self.syncs = 0  # completed group commits (stats for the bench and tests)
        self.inline_syncs = 0  # of which run on the loop thread
        self._space_warned = -SPACE_RETRY  # monotonic time of the last "WAL full" warning
        self._short_cost = 0
        self._put_cost: Callable[[int], int] = int
        if storage is not None:
            # Imported here: the log package costs ~0.1 s to import, which an in-memory server
            # does not need before it listens.
            from stalkd.engine.space import SHORT_FRAME, put_frame

            self._short_cost, self._put_cost = SHORT_FRAME, put_frame
        # Counters for the admin endpoint's metrics (the engine counts commands itself).
        self.refused_connections = 0  # over --max-connections
        self.refused_for_space = 0  # commands refused because the WAL had no room
        # Called with (command or None, outcome) for every engine step when set (the admin
        # endpoint's latency histograms); one attribute test per step when not.
        self.observer: Callable[[Command | None, Outcome], None] | None = None
        self._host_id = os.urandom(8).hex()  # beanstalkd's random per-process id
        self._uname = os.uname()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, looked up once: ``asyncio.get_running_loop()`` costs a ``getpid``
        system call (its fork check), which the hot path would pay per command."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def _soon(self, callback: Callable[[], object]) -> None:
        loop = self._loop
        (loop if loop is not None else self.loop()).call_soon(callback)

    # --- connections -------------------------------------------------------------------------

    def new_connection(self) -> Connection:
        """Protocol factory for ``loop.create_server``."""
        self._next_conn += 1
        return Connection(self, self._next_conn, self.config.max_job_size, self.config.max_output)

    def connected(self, c: Connection) -> None:
        if self.stopping or self.failed is not None:
            c.closing = True
            assert c.transport is not None
            c.transport.close()
            return
        if len(self.conns) >= self.config.max_connections:
            log.warning("conn %d from %s refused: %d connections is the limit (--max-connections)",
                        c.id, c.peer, self.config.max_connections)
            self.refused_connections += 1
            c.closing = True
            assert c.transport is not None
            c.transport.abort()
            return
        self.conns[c.id] = c
        self.engine.connect(c.id, self.clock())
        log.debug("conn %d open from %s", c.id, c.peer)

    def half_closed(self, c: Connection) -> None:
        if c.id not in self.conns or c.closing:
            return
        out = self.engine.half_close(c.id, self.clock())
        # A blocked reserve ends with TIMED_OUT; otherwise there is no reply for ``c``.
        if out.reply is not None:
            c.waiting = False
        self._handle(c if out.reply is not None else None, out)

    def retire(self, c: Connection) -> None:
        """``c`` will run no more commands (its client hung up): release its jobs now rather
        than when the transport reports the close, so the next command anyone sends sees it."""
        if self.conns.pop(c.id, None) is not None:
            self._handle(None, self.engine.disconnect(c.id, self.clock()))

    def disconnected(self, c: Connection, exc: Exception | None) -> None:
        self._held.discard(c)
        if self._writer is c:
            self._writer = None  # keep no closed connection alive (the next writer is "another")
        if self.conns.pop(c.id, None) is None:
            return
        if exc is not None:
            log.info("conn %d from %s lost: %s", c.id, c.peer, exc)
        else:
            log.debug("conn %d closed", c.id)
        self._handle(None, self.engine.disconnect(c.id, self.clock()))

    def hold(self, c: Connection) -> None:
        """``c`` has replies waiting for a barrier."""
        self._held.add(c)

    def begin_step(self) -> None:
        """A connection starts running the commands it has read."""
        self._steps += 1

    def end_step(self) -> None:
        """A connection ran what it had read. A lone ``always`` writer's records are written
        (and fsynced inline) now: nobody else's can join its batch, and this saves a loop
        iteration before its replies leave. Otherwise at the start of the next iteration, so
        every connection read in this one shares one WAL write (each ``Wal.write`` call has a
        fixed cost: writing per connection step, A/B ``--peer-src``, never 16 conns depth 1
        gave 0.62-0.70x the jobs/s) and, with ``always``, one fsync."""
        self._steps -= 1
        if self._steps or not self._step_records:
            return
        self._step_records = False
        if self.group_commit and self.written - self._mixed >= INLINE_AFTER:
            self._close_batch()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._soon(self._close_batch)

    # --- commands ----------------------------------------------------------------------------

    def execute(self, c: Connection, cmd: Command) -> None:
        """Run one parsed command for ``c`` and route every reply it produced."""
        st = self.storage
        if st is None:  # in memory: no room to promise, no record to settle
            try:
                out = self.engine.apply(c.id, cmd, self.clock())
            except Exception:
                log.exception("conn %d: engine failed on %r; replying INTERNAL_ERROR", c.id, cmd)
                c.send(Reply("INTERNAL_ERROR"), 0)
                return
            self._handle(c, out, cmd)
            return
        cost = 0
        now = self.clock()
        unlogged = False  # a release to ready without WAL room: applied, its record not written
        kind = type(cmd)
        if kind is C.Put:
            if cmd.error is None:  # type: ignore[union-attr]
                cost = self._put_cost(len(cmd.body))  # type: ignore[union-attr]
        elif kind in _ONE_RECORD:
            # beanstalkd looks the job up before reserving log space: NOT_FOUND beats
            # OUT_OF_MEMORY for a job this connection cannot act on.
            if self.engine.finds_job(c.id, cmd, now):
                cost = self._short_cost
        elif kind is C.Kick:
            bound = cmd.bound  # type: ignore[union-attr]
            n = st.admit_upto(min(bound, len(self.engine.jobs)), self._short_cost)
            if n == 0 and bound > 0:
                self._refuse(c, cmd)
                return
            cost = n * self._short_cost
            if n < bound:
                cmd = C.Kick(n)
        if cost and kind is not C.Kick and not st.admit(cost):
            if kind is C.Release and cmd.delay == 0:  # type: ignore[union-attr]
                # beanstalkd never logs a release to ready, so it cannot fail for space: the
                # job is reserved (not durable) anyway and comes back ready after a restart,
                # only its new priority is lost there.
                unlogged, cost = True, 0
            else:
                self._refuse(c, cmd)
                return
        try:
            out = self.engine.apply(c.id, cmd, now)
        except Exception:
            log.exception("conn %d: engine failed on %r; replying INTERNAL_ERROR", c.id, cmd)
            if cost:
                st.settle(cost, ())
            c.send(Reply("INTERNAL_ERROR"), 0)
            return
        if unlogged:
            out = out._replace(records=tuple(r for r in out.records if r.op is not Op.RELEASE))
        if cost or out.records:
            st.settle(cost, out.records)
        self._handle(c, out, cmd)

    def _refuse(self, c: Connection, cmd: Command) -> None:
        """No WAL room for ``cmd``'s records: beanstalkd's replies for a failed reservation."""
        self.refused_for_space += 1
        now = time.monotonic()
        if now - self._space_warned > SPACE_RETRY:
            self._space_warned = now
            log.warning("WAL full: refusing %s (conn %d); reads and deletes still work; free space "
                        "in %s", type(cmd).__name__.lower(), c.id, self.config.data_dir)
        kind = type(cmd)
        c.send(_NOT_FOUND if kind is C.KickJob else _KICKED_0 if kind is C.Kick else _OUT_OF_MEMORY, 0)

    def _handle(self, c: Connection | None, out: Outcome, cmd: Command | None = None) -> None:
        """Queue ``out.records`` for the WAL and route its replies (``c``: who gets ``out.reply``,
        ``cmd``: the command that produced it, None for timers and hang-ups)."""
        if self.observer is not None:
            self.observer(cmd, out)
        barrier = 0
        records = out.records
        if records and self.storage is not None:
            self._pending.extend(records)
            if self._steps and not self._releasing:
                self._step_records = True  # end_step decides: write now, or next iteration
            elif not self._flush_scheduled:
                self._flush_scheduled = True
                self._soon(self._close_batch)
            job_batch = self._job_batch
            for r in records:
                if r.op in DURABLE_OPS:
                    if not barrier:
                        barrier = self._batch(c)
                    jid = r.job_id
                    if jid:
                        job_batch[jid] = barrier
                        self._job_batches.append((barrier, jid))
        reply = out.reply
        if c is not None:
            if type(reply) is JobReply:
                # Never show a job before its own records (put, release, bury, kick) are durable.
                b = self._job_batch.get(reply.id, 0)
                if b > barrier:
                    barrier = b
            elif type(reply) is YamlDict and reply.kind == "stats":
                reply = self._full_stats(reply)
            c.send(reply, barrier)
        if out.wakeups:
            for cid, wr in out.wakeups:
                w = self.conns.get(cid)
                if w is not None:
                    if type(wr) is JobReply:
                        b = self._job_batch.get(wr.id, 0)
                        w.wake(wr, b if b > barrier else barrier)
                    else:
                        w.wake(wr, self.written)
        if out.next_deadline is not None:
            self._schedule_tick(out.next_deadline)

    # --- group commit ------------------------------------------------------------------------

    def _batch(self, c: Connection | None) -> int:
        """The batch number this loop iteration's durable records (``c``'s) belong to."""
        if not self._batch_open:
            self._batch_open = True
            self.written += 1
        if c is not self._writer:
            self._writer = c
            self._mixed = self.written
        return self.written

    def _close_batch(self) -> None:
        """Next loop iteration: one WAL write for every record of the last one, then (``always``)
        one fsync for all of them off the loop thread, or (``never``/``every``) release now:
        the records are in the kernel, which is what those policies promise."""
        self._flush_scheduled = False
        records, self._pending = self._pending, []
        if records and self.storage is not None and self.failed is None:
            try:
                self.storage.write(records)
            except Exception as e:
                # BUG: the engine already applied these changes; memory now runs ahead of the
                # WAL. Nothing of the batch is acknowledged and the server stops, rather than
                # diverge further. (A full disk should fail one put instead; needs WAL space
                # reservation before the engine applies a command.)
                self._fatal(FatalStorageError(f"WAL write failed: {e}"))
                return
        if not self._batch_open:
            return
        self._batch_open = False
        if self.group_commit:
            self._start_sync()
        else:
            self.durable = self.written
            self._forget_durable()
            self._release_held()

    def _start_sync(self) -> None:
        syncer = self._syncer
        if ((syncer is not None and syncer.busy) or self.durable >= self.written
                or self.failed is not None):
            return
        assert self.storage is not None
        lone = self.written - self._mixed >= INLINE_AFTER
        if lone or self.sync_policy.inline():
            # One client alone is writing (the last INLINE_AFTER batches were all its own): it
            # waits for this fsync and nobody else has anything to run meanwhile, so a thread
            # hand-off only adds latency (two wake-ups, a GIL hand-back). Measured A/B with
            # bench/server_bench.py, 1 conn depth 1: 1.47x the jobs/s of the thread. A second
            # writer switches back to the thread at once (its first batch). Or several write
            # and the policy measured the hand-off dearer than the fsync (see SyncPolicy).
            target = self.written
            t0 = time.perf_counter()
            try:
                self.storage.sync()
            except Exception as e:
                self._synced(target, e)
                return
            if not lone:
                self.sync_policy.inline_done(time.perf_counter() - t0)
            self.inline_syncs += 1
            self._synced(target, None)
            return
        if syncer is None:
            syncer = self._syncer = Syncer(self.storage.sync, self._synced, self.loop(),
                                           timing=self.sync_policy.thread_done)
            # When fsync returns, the sync thread must win the GIL back from a busy loop thread;
            # the default 5 ms switch interval would add up to 5 ms to every acknowledgement.
            sys.setswitchinterval(SWITCH_INTERVAL)
        syncer.request(self.written)

    def _synced(self, target: int, exc: BaseException | None) -> None:
        if exc is not None:
            self._fatal(FatalStorageError(f"WAL sync failed: {exc}"))
            return
        self.syncs += 1
        self.durable = target
        self._forget_durable()
        self._release_held()
        if self.written > self.durable and not self._batch_open:
            self._start_sync()

    def _forget_durable(self) -> None:
        """Drop the job barriers of batches now durable (they no longer hold anything back)."""
        durable, queue, job_batch = self.durable, self._job_batches, self._job_batch
        while queue and queue[0][0] <= durable:
            b, jid = queue.popleft()
            if job_batch.get(jid) == b:
                del job_batch[jid]

    def _release_held(self) -> None:
        durable = self.durable
        self._releasing = True
        try:
            for c in list(self._held):
                if not c.release_held(durable):
                    self._held.discard(c)
                c.flush()
                if (not c.closing and not c.waiting and not c.lost
                        and (c.read_paused or c.eof or c.parser.buffered)):
                    c.process()  # it may have stopped on its output limit
        finally:
            self._releasing = False
        if self._step_records:
            # Records of the commands those connections ran: the next iteration writes them.
            self._step_records = False
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._soon(self._close_batch)

    async def wait_durable(self, timeout: float) -> bool:
        """Wait until everything written so far is durable (used when stopping)."""
        deadline = time.monotonic() + timeout
        while self.durable < self.written and self.failed is None:
            if self._pending or self._batch_open:
                self._close_batch()
            self._start_sync()
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)  # poll: the sync's done-callback advances ``durable``
        return self.failed is None

    def _fatal(self, e: BaseException) -> None:
        if self.failed is not None:
            return
        self.failed = e
        log.critical("%s", e)
        for c in list(self.conns.values()):
            c.closing = True
            c.held.clear()
            if c.transport is not None:
                c.transport.abort()
        if self.on_fatal is not None:
            self.on_fatal(e)

    # --- timers ------------------------------------------------------------------------------

    def _schedule_tick(self, deadline: float) -> None:
        if self._timer_at is not None and self._timer_at <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = deadline - self.clock() + _TIMER_SLACK
        self._timer = self.loop().call_later(max(0.0, delay), self._tick)
        self._timer_at = deadline

    def _tick(self) -> None:
        self._timer = None
        self._timer_at = None
        out = self.engine.tick(self.clock())
        self._handle(None, out)

    def start_maintenance(self, every: float = 1.0) -> None:
        """Let the WAL snapshot/compact periodically (it never blocks the loop for long)."""
        if self.storage is None:
            return
        loop = asyncio.get_running_loop()

        def run() -> None:
            if self.stopping or self.failed is not None:
                return
            assert self.storage is not None
            try:
                busy = self.storage.maintain(self.engine, self.clock())
            except Exception as e:
                if not _no_space(e):
                    self._fatal(FatalStorageError(f"WAL maintenance failed: {e}"))
                    return
                log.warning("snapshot dropped for lack of space (the WAL and the last snapshot are "
                            "intact; retrying in %.0f s): %s", SPACE_RETRY, e)
                self._maint = loop.call_later(SPACE_RETRY, run)
                return
            # A snapshot in progress copies a bounded chunk per call: come back soon.
            self._maint = loop.call_later(0.001 if busy else every, run)

        self._maint = loop.call_later(every, run)

    # --- stats -------------------------------------------------------------------------------

    def _full_stats(self, reply: YamlDict) -> YamlDict:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        values = dict(reply.values)
        values.update({
            "pid": os.getpid(),
            "version": BEANSTALKD_VERSION,
            "rusage-utime": float(ru.ru_utime),
            "rusage-stime": float(ru.ru_stime),
            "uptime": int(self.clock() - self.started),
        })  # fmt: skip
        binlog = self.storage.stats() if self.storage is not None else {}
        for k in _BINLOG_KEYS:
            values[k] = int(binlog.get(k, 0))
        values.update({
            "id": self._host_id,
            "hostname": self._uname.nodename,
            "os": self._uname.version,
            "platform": self._uname.machine,
        })  # fmt: skip
        return YamlDict("stats", values)

    # --- stopping ----------------------------------------------------------------------------

    def drain(self) -> None:
        """SIGUSR1: later puts get DRAINING (beanstalkd cannot leave drain mode either)."""
        self.engine.set_draining(True)
        log.info("drain mode on (SIGUSR1): new puts get DRAINING")

    def begin_stop(self) -> None:
        """SIGTERM: run no new commands; replies already produced still go out."""
        self.stopping = True
        for c in list(self.conns.values()):
            c.closing = True
        if self._timer is not None:
            self._timer.cancel()
        if self._maint is not None:
            self._maint.cancel()

    def finish_stop(self) -> None:
        """After the last sync: send what is held, close every connection."""
        if self.failed is None:
            self._release_held()
        for c in list(self.conns.values()):
            c.abort_after_flush()
        if self._syncer is not None:
            self._syncer.stop()


def _no_space(e: BaseException | None) -> bool:
    """Whether ``e`` (or what caused it) is a full disk or an exhausted quota."""
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if type(e).__name__ == "LogFullError":
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False
