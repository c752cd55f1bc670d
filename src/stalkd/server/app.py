"""The server: one engine on the event loop, with the collaborators around it.

``Server.execute`` runs one command through the engine and routes the replies it produced.
The work around that is split by responsibility:

- ``Admission`` (admission.py): the WAL room the engine asks for before a change;
- ``Barriers`` (barriers.py): the batch each reply waits for, WAL writes and group commit;
- ``Registry`` (registry.py): the open connections and ``--max-connections``;
- ``MemoryBudget`` (budget.py): what all connections hold together, ``--max-memory``;
- ``Connection`` (connection.py): one client's bytes, parser and reply queue.

A server without a data directory uses ``MemoryStorage`` (storage.py), which keeps nothing;
nothing here branches on whether there is a disk.

Ensures:
- A reply produced by an outcome with DURABLE_OPS records (its own reply and its wakeups) is
  sent only after those records are durable under the policy: fsynced for ``always``, written
  to the kernel for ``never`` / ``every:<ms>`` (those survive ``kill -9``).
- A job body is never shown (RESERVED/FOUND) before the job's own records (its put, and any
  release, bury or kick of it) are durable.
- An fsync failure is fatal: nothing held is ever sent, the server logs it and exits non-zero.
- A full disk refuses changes, never reads: WAL room for a command's records is promised
  before the engine applies it (``Engine.room``), so a refused command changed nothing, and a
  delete always has room (its put promised it). A snapshot that fails for lack of space is
  retried later with a warning; the WAL and the previous snapshot are intact.
- Timers: the engine's next deadline is always scheduled (a single loop timer); work the
  engine left for a later step (its step budget) goes on at the next loop iteration, so
  other connections are read and served between the slices.
- Replication (``stalkd.replication``): while ``role`` refuses (a standby, or a primary that
  saw a newer epoch) only ``STANDBY_COMMANDS`` run; anything else gets ``NOT_PRIMARY`` and
  changes nothing. A connection whose first bytes are a replication request is handed to
  ``replicas`` (refused as an unknown command when there are none: no data directory).
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from stalkd.engine.engine import Engine
from stalkd.engine.state import Outcome
from stalkd.engine.stats import TOTALS
from stalkd.protocol.commands import Command, JobReply, ListTubes, Reply, YamlDict, YamlList
from stalkd.protocol.grammar import NOT_PRIMARY, SPECS_BY_NAME, STANDBY_COMMANDS
from stalkd.server.admission import Admission
from stalkd.server.barriers import Barriers
from stalkd.server.budget import TICK, MemoryBudget, default_limit
from stalkd.server.clock import SteadyClock, steady_wall_clock
from stalkd.server.config import BEANSTALKD_VERSION, Config
from stalkd.server.connection import Connection, Host
from stalkd.server.fastconn import new_connection
from stalkd.server.registry import Registry
from stalkd.server.stattotals import StatsTotals
from stalkd.server.storage import FatalStorageError, MemoryStorage, Storage, no_space

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
    from stalkd.replication.role import Role
    from stalkd.replication.sender import Replicas
    from stalkd.replication.status import Status
    from stalkd.server.turns import Turns
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Server", "Storage", "FatalStorageError"]

log = logging.getLogger("stalkd.server")

_BINLOG_KEYS = (
    "binlog-oldest-index", "binlog-current-index", "binlog-records-migrated",
    "binlog-records-written", "binlog-max-size",
)  # fmt: skip
SPACE_RETRY = 5.0  # seconds between snapshot attempts while the disk is full
_INTERNAL_ERROR = Reply("INTERNAL_ERROR")
_TIMER_SLACK = 0.001  # loop timers may fire a hair early; the engine would then do nothing
_NOT_PRIMARY = Reply(NOT_PRIMARY)
_STANDBY_OK = frozenset(SPECS_BY_NAME[n].build for n in STANDBY_COMMANDS)


def _role_alone() -> Role:
    """The role of a server without a data directory: a primary, whose epochs live in memory."""
    from stalkd.replication.role import Role

    return Role(None)


@cython.cclass
class Server(Host):
    """Engine + connections + group commit. Build it, then ``loop.create_server(srv.new_connection, sock=...)``.

    Compiled, an extension type whose fields and C methods app.pxd declares: a connection's
    reply, the barriers and the admission are C calls and field reads from here.

    >>> from stalkd.engine import Engine  # compiled, app's own Engine is a C type, not a global
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
        clock: Callable[[], float] | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.config = config
        self.engine = engine
        self.storage: Storage = storage if storage is not None else MemoryStorage()
        self.clock = clock = clock or steady_wall_clock()  # delays and TTRs in elapsed time
        self.on_fatal = on_fatal
        self.conns: Registry[Connection] = Registry(config.max_connections,
                                                    per_address=config.max_handshakes_per_address)
        limit = config.max_memory if config.max_memory is not None else default_limit(config.max_job_size)
        self.memory = MemoryBudget(limit)
        self._memory_timer: asyncio.TimerHandle | None = None
        # The loop's time per turn, shared by the connections (turns.py): serve.py sets it for
        # a listening server; None (a server driven by hand, as in unit tests): no deadline.
        self.turns: Turns | None = None
        self.totals: StatsTotals | None = None  # counts stats' job totals past many tubes
        self.started = clock()
        self._loop: asyncio.AbstractEventLoop | None = None  # see loop()
        # False in memory: no records, so no reply ever waits for a barrier.
        self.persistent = persistent = self.storage.persistent
        self.group_commit = persistent and config.durability == "always"
        self.barriers = Barriers(self.storage, group_commit=self.group_commit,
                                 loop=self.loop_or_none, on_fatal=self._fatal)
        # A storage that keeps nothing never runs out of room: the engine asks nobody. A WAL's
        # admission calls its batches directly (imported here: the WAL is loaded by now, and a
        # server without a data directory never loads it).
        self.admission: Admission | None = None
        if persistent:
            from stalkd.server.waladmission import admission_for

            self.admission = admission_for(self.storage, config.data_dir)
        engine.room = self.admission
        # Called with (command or None, outcome) for every engine step when set (the admin
        # endpoint's latency histograms); one attribute test per step when not.
        self.observer: Callable[[Command | None, Outcome], None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._maint: asyncio.TimerHandle | None = None
        self.stopping = False
        self.failed: BaseException | None = None
        self.host_id = os.urandom(8).hex()  # beanstalkd's random per-process id (stats "id")
        # where clients reach this server (serve.py sets them once listening): the admin
        # endpoint reports them, so `stalkd top --admin URL` needs no second address
        self.addresses: tuple[str, ...] = ()
        # serve.py sets the data directory's role and status (stalkd.replication). Without one,
        # both are made when first read (stats, the admin endpoint): a primary never fenced,
        # quiet until then, so a start in memory does not import replication's modules.
        self._role: Role | None = None
        self.role_quiet = True
        self.replicas: Replicas | None = None  # the standbys following this server's WAL
        self.standby_lag: Callable[[], int] | None = None  # a standby: records behind its primary
        self.promote: Callable[[], str] | None = None  # a standby: become primary (new epoch)
        self._replication: Status | None = None
        self.cluster: Callable[[], dict[str, int | float | str]] | None = None  # --ha: leader, lease
        self._uname = os.uname()

    @property
    def role(self) -> Role:
        """Primary, standby or fenced (stalkd.replication.role)."""
        role = self._role
        if role is None:  # a server without a data directory, asked for the first time
            self.role = role = _role_alone()
        return role

    @role.setter
    def role(self, role: Role) -> None:
        # ``role_quiet`` mirrors ``role.quiet`` (a C field read per command, compiled); a role
        # object that cannot mirror leaves it False: ``quiet`` is then read as before.
        old = self._role
        if old is not None and hasattr(old, "mirror_quiet"):
            old.mirror_quiet(self, False)
        self.role_quiet = False
        self._role = role
        if hasattr(role, "mirror_quiet"):
            role.mirror_quiet(self)

    @property
    def replication(self) -> Status:
        """What stats and /readyz say of replication (serve.py sets its parts)."""
        rep = self._replication
        if rep is None:
            from stalkd.replication.status import Status

            self._replication = rep = Status(self.role)
        return rep

    @replication.setter
    def replication(self, status: Status) -> None:
        self._replication = status

    def loop_or_none(self) -> asyncio.AbstractEventLoop | None:
        """The loop once a connection or ``loop()`` looked it up (the barriers' callbacks)."""
        return self._loop

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, looked up once: ``asyncio.get_running_loop()`` costs a ``getpid``
        system call (its fork check), which the hot path would pay per command."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    # Barrier figures, read by serve.py, the bench and the tests.
    @property
    def durable(self) -> int:
        return self.barriers.durable

    @property
    def written(self) -> int:
        return self.barriers.written

    @property
    def syncs(self) -> int:
        return self.barriers.syncs

    @property
    def inline_syncs(self) -> int:
        return self.barriers.inline_syncs

    # Counters for the admin endpoint's metrics (the engine counts commands itself).
    @property
    def refused_connections(self) -> int:
        """Connections refused over --max-connections."""
        return self.conns.refused_total

    @property
    def refused_for_space(self) -> int:
        """Commands refused because the WAL had no room."""
        return 0 if self.admission is None else self.admission.refused

    # --- connections -------------------------------------------------------------------------

    def new_connection(self) -> Connection:
        """Protocol factory for ``loop.create_server``."""
        self.loop()
        return new_connection(self, self.conns.next_id(), self.config.max_job_size, self.config.max_output)

    def connected(self, c: Connection) -> None:
        if self.stopping or self.failed is not None:
            c.refuse(abort=False)
            return
        if not self.conns.admit(c.id, c, c.peer):
            c.refuse(abort=True)
            return
        self.engine.connect(c.id, self.clock())
        if c.identity is not None:
            self.engine.name_owner(c.id, c.identity)  # whose results it stores
        log.debug("conn %d open from %s", c.id, c.peer)

    def half_closed(self, c: Connection) -> None:
        if c.id not in self.conns or c.closing:
            return
        out = self.engine.half_close(c.id, self.clock())
        # A blocked reserve ends with TIMED_OUT; otherwise there is no reply for ``c``.
        if out.reply is not None:
            c.end_wait()
        self._handle(c if out.reply is not None else None, out)

    def retire(self, c: Connection) -> None:
        """``c`` will run no more commands (its client hung up): release its jobs now rather
        than when the transport reports the close, so the next command anyone sends sees it."""
        if self.conns.remove(c.id) is not None:
            self.engine.name_owner(c.id, None)
            self._handle(None, self.engine.disconnect(c.id, self.clock()))

    def disconnected(self, c: Connection, exc: Exception | None) -> None:
        self.barriers.forget(c)
        self.memory.forget(c)
        if self.conns.remove(c.id) is None:
            return
        if exc is not None:
            log.info("conn %d from %s lost: %s", c.id, c.peer, exc)
        else:
            log.debug("conn %d closed", c.id)
        self.engine.name_owner(c.id, None)
        self._handle(None, self.engine.disconnect(c.id, self.clock()))

    def account(self, c: Connection, inp: int, out: int) -> None:
        """``c`` holds ``inp`` bytes of input and ``out`` of replies (budget.py); the budget's
        timer runs while it tracks anyone."""
        m = self.memory
        m.charge(c, inp, out)
        if self._memory_timer is None and m.active() and not self.stopping:
            self._memory_timer = self.loop().call_later(TICK, self._memory_tick)

    def _memory_tick(self) -> None:
        m = self.memory
        m.tick()  # the fired handle stays set meanwhile: ``account`` schedules no second timer
        self._memory_timer = (self.loop().call_later(TICK, self._memory_tick)
                              if m.active() and not self.stopping else None)

    def hold(self, c: Connection) -> None:
        """``c`` has replies waiting for a barrier."""
        self.barriers.hold(c)

    # --- commands ----------------------------------------------------------------------------

    def execute(self, c: Connection, cmd: Command) -> None:
        """Run one parsed command for ``c`` and route every reply it produced.

        Its common case (a primary never fenced, no observer; a plain reply, no records or
        wakeups) sends the reply here; anything else is ``_handle``'s."""
        # One C field read in the common case (a primary never fenced, no lease: the role's
        # ``quiet``, mirrored): refuses() is asked only when it might say yes.
        if not self.role_quiet:
            role = self.role
            if not role.quiet and type(cmd) not in _STANDBY_OK and role.refuses():
                c.send(_NOT_PRIMARY, 0)
                return
        adm = self.admission
        clock = self.clock
        # the server's own clock is read with a C call (compiled), a clock given to it is called
        now = cython.cast(SteadyClock, clock).now() if type(clock) is SteadyClock else clock()
        try:
            out = self.engine.apply(c.id, cmd, now)
        except Exception as e:
            self._apply_failed(c, cmd, e)
            return
        # compiled, the Outcome's fields are struct reads (app.pxd types ``out``)
        reply, records, wakeups, next_deadline = out.reply, out.records, out.wakeups, out.next_deadline
        if adm is not None and (adm.promised or records):
            adm.settle(records)
        if type(reply) is Reply and not records and not wakeups and self.observer is None:
            c.send(reply, 0)  # _handle's common case (put or delete in memory, use, watch)
            if next_deadline is not None and (self._timer_at is None or next_deadline < self._timer_at):
                self._schedule_tick(next_deadline)
            return
        self._handle(c, out, cmd)

    def _apply_failed(self, c: Connection, cmd: Command, e: Exception) -> None:
        """The engine raised on ``cmd`` (a bug): ``c`` gets INTERNAL_ERROR, the log says why."""
        log.error("conn %d: engine failed on %r; replying INTERNAL_ERROR", c.id, cmd, exc_info=e)
        if self.admission is not None:
            self.admission.settle(())
        c.send(_INTERNAL_ERROR, 0)

    def replicate(self, c: Connection, data: bytes) -> bool:
        """``c``'s first bytes ask for the WAL (a standby): hand its socket to ``replicas``.
        False: this server has no WAL to ship (the bytes are parsed as a command)."""
        replicas = self.replicas
        if replicas is None or c.transport is None:
            return False
        policy = c.policy  # only a TLS listener's ACL grants replication; else the secret decides
        granted = policy is not None and c.identity is not None and policy.may_replicate()
        self.barriers.forget(c)
        self.memory.forget(c)
        if self.conns.remove(c.id) is not None:
            self.engine.name_owner(c.id, None)
            self._handle(None, self.engine.disconnect(c.id, self.clock()))
        c.lost = c.closing = True  # the connection object is done; the transport lives on
        replicas.take_over(c.transport, data, granted)
        return True

    def applied(self) -> None:
        """A standby applied replicated records: reschedule the engine's timers (delays)."""
        out = self.engine.tick(self.clock())
        self._handle(None, out)

    def _handle(self, c: Connection | None, out: Outcome, cmd: Command | None = None) -> None:
        """Queue ``out.records`` for the WAL and route its replies (``c``: who gets ``out.reply``,
        ``cmd``: the command that produced it, None for timers and hang-ups)."""
        if self.observer is not None:
            self.observer(cmd, out)
        barriers = self.barriers
        reply, records, wakeups, next_deadline = out.reply, out.records, out.wakeups, out.next_deadline
        barrier = barriers.add(c, records) if records and self.persistent else 0
        if c is not None:
            if type(reply) is JobReply and self.persistent:
                # Never show a job before its own records (put, release, bury, kick) are durable.
                b = barriers.job_barrier(reply.id)
                if b > barrier:
                    barrier = b
                    if self.role.fenced and self.role.refuses():
                        reply, barrier = _NOT_PRIMARY, 0  # never durable here: no silence
            elif type(reply) is YamlDict and reply.kind == "stats":
                if TOTALS[0] in reply.values:
                    reply = self._full_stats(reply)
                else:  # many tubes: the engine left the job totals to us, counted over turns
                    self._count_totals(c, reply)
                    reply = None  # c waits for them, as in a blocked reserve
            elif type(reply) is YamlList and type(cmd) is ListTubes and c.policy is not None:
                reply = YamlList(tuple(filter(c.policy.shows, reply.items)))  # what it may see
            c.send(reply, barrier)
        if wakeups:
            for cid, wr in wakeups:
                w = self.conns.get(cid)
                if w is not None:
                    if type(wr) is JobReply:
                        if self.role.refuses():
                            # A job for a reserve that waited since before a fence, or past our
                            # lease: not ours to give (its connection is cut; the job goes back).
                            w.abort()
                            continue
                        b = barriers.job_barrier(wr.id)
                        w.wake(wr, b if b > barrier else barrier)
                    else:
                        w.wake(wr, barriers.written)
        if next_deadline is not None and (self._timer_at is None or next_deadline < self._timer_at):
            self._schedule_tick(next_deadline)

    async def wait_durable(self, timeout: float) -> bool:
        """Wait until everything written so far is durable (used when stopping)."""
        return await self.barriers.wait_durable(timeout)

    def _fatal(self, e: BaseException) -> None:
        if self.failed is not None:
            return
        self.failed = e
        self.barriers.failed = True
        log.critical("%s", e)
        for c in self.conns:
            c.abort()
        if self.on_fatal is not None:
            self.on_fatal(e)

    # --- timers ------------------------------------------------------------------------------

    def _schedule_tick(self, deadline: float) -> None:
        """Move the loop timer to ``deadline``; callers ask only when it is earlier (or none)."""
        if self._timer is not None:
            self._timer.cancel()
        delay = deadline - self.clock()
        # Work left over from the last step (a kick, jobs still due) runs on the next loop
        # iteration, after the clients already ready to be read; a future timer gets the slack.
        self._timer = self.loop().call_later(delay + _TIMER_SLACK if delay > 0 else 0.0, self._tick)
        self._timer_at = deadline

    def _tick(self) -> None:
        self._timer = None
        self._timer_at = None
        out = self.engine.tick(self.clock())
        adm = self.admission
        if adm is not None and (adm.promised or out.records):
            adm.settle(out.records)  # a kick's step asked for room
        self._handle(None, out)

    def start_maintenance(self, every: float = 1.0) -> None:
        """Let the WAL snapshot/compact periodically (it never blocks the loop for long)."""
        if not self.storage.persistent:
            return
        loop = asyncio.get_running_loop()
        # The disk was full at the last look: the next is SPACE_RETRY later, whatever seals
        # meanwhile (else a writer sealing segments would start, and drop, a snapshot per segment).
        full = [False]

        def run() -> None:
            if self.stopping or self.failed is not None:
                return
            try:
                self.barriers.write_pending()  # a snapshot starts only once every record is written
                busy = self.storage.maintain(self.engine, self.clock())
            except Exception as e:
                if not no_space(e):
                    self._fatal(FatalStorageError(f"WAL maintenance failed: {e}"))
                    return
                log.warning("snapshot dropped for lack of space (the WAL and the last snapshot are "
                            "intact; retrying in %.0f s): %s", SPACE_RETRY, e)
                full[0] = True
                self._maint = loop.call_later(SPACE_RETRY, run)
                return
            full[0] = False
            # A snapshot in progress copies a bounded chunk per call: come back soon.
            self._maint = loop.call_later(0.001 if busy else every, run)

        def soon() -> None:
            # A segment was sealed: look now rather than at the next tick. The WAL's files stay
            # within their bound only if compaction looks at least once per segment written, and
            # a fast writer fills several a second (bench/churn_bench.py: 4x the bound at full
            # churn with only the ticks).
            h = self._maint
            if full[0]:
                return
            if h is not None and h.when() > loop.time() and not (self.stopping or self.failed):
                h.cancel()
                self._maint = loop.call_later(0.0, run)

        # The log seals segments on whichever thread writes: hand the look to the loop.
        self.storage.on_segment(lambda: loop.call_soon_threadsafe(soon))
        # The first look is at once: a WAL recovered with a snapshot's worth of records since the
        # last one (a crash loop) starts compacting before the next kill, not a second later.
        self._maint = loop.call_later(0.0, run)

    # --- stats -------------------------------------------------------------------------------

    def _count_totals(self, c: Connection, reply: YamlDict) -> None:
        """Answer ``c``'s ``stats`` once its job totals are counted (stattotals.py)."""
        totals = self.totals
        if totals is None:
            engine = self.engine
            totals = self.totals = StatsTotals(lambda: engine.tube_order, self.loop().call_soon)
        totals.ask(partial(self._totals_counted, c, reply))

    def _totals_counted(self, c: Connection, reply: YamlDict, figures: dict[str, int]) -> None:
        if not c.lost:
            c.wake(self._full_stats(YamlDict("stats", {**figures, **reply.values})), 0)

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
        binlog = self.storage.stats()
        for k in _BINLOG_KEYS:
            values[k] = int(binlog.get(k, 0))
        values.update(self.replication.stats())
        if self.cluster is not None:
            values.update(self.cluster())
        m = self.memory
        values["max-memory"] = m.limit
        values["current-memory"] = m.used
        values["current-memory-paused"] = len(m.held)
        values["total-memory-closed"] = m.closed
        values.update({
            "id": self.host_id,
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
        for c in self.conns:
            c.stop_commands()
        if self._timer is not None:
            self._timer.cancel()
        if self._maint is not None:
            self._maint.cancel()
            self.storage.on_segment(None)  # the loop may be gone by the log's next seal
        if self._memory_timer is not None:
            self._memory_timer.cancel()
            self._memory_timer = None

    def finish_stop(self) -> None:
        """After the last sync: send what is held, close every connection."""
        if self.failed is None:
            self.barriers.release_held()
        for c in self.conns:
            c.abort_after_flush()
        self.barriers.stop()

    def unsent(self) -> bool:
        """Whether some open connection still has reply bytes to write (stopping waits)."""
        return any(c.unsent() for c in self.conns)
