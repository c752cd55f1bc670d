"""A running standby, and its promotion: the glue between the receiver, the role and the server.

``Standby.start`` runs the receiver on the server's loop. ``promote`` (``stalkd promote``, the
admin endpoint's ``POST /api/v1/promote``, or SIGUSR2) stops following, starts a new epoch at
the local log's end (an EPOCH record there, durable before anything is written under it), lets
the engine write records again, and then keeps telling the former primary about the new epoch (``fence``) so that,
whenever it is reachable, it stops acting as primary.

When the primary cannot stream to the local log (it compacted past it, or the log holds records
it never had) the standby resyncs while it runs: ``catchup.catch_up`` copies the primary's
snapshot and the records after it into ``DIR/resync/`` on a thread, the old copy serving reads
meanwhile; then, on the loop, the old ``wal/`` and ``snapshots/`` go to ``quarantine/`` (never
deleted) and the copy takes their place (``swap``: a power cut at any step leaves one of them
whole), and the engine is recovered from it in place: the same
object, so the server's hooks hold, with each client's connection and its tubes (use, watch)
kept.

Ensures: after ``promote`` returns, the server accepts changes; every record it writes comes
after the replicated ones, at the next offset; reserved jobs of the old primary are ready (the
standby never saw reservations as durable, as after a restart) and delays continue from the
replicated deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING

from stalkd.client._address import Address
from stalkd.client._tls import connection_kwargs
from stalkd.engine.handover import epoch_record
from stalkd.protocol import commands as C
from stalkd.replication import wire
from stalkd.replication.catchup import catch_up
from stalkd.replication.epochs import MAX_EPOCH
from stalkd.replication.receiver import Receiver, ask
from stalkd.replication.role import Role
from stalkd.replication.swap import RESYNC_DIR, swap_in

if TYPE_CHECKING:
    from stalkd.engine import Engine
    from stalkd.persist.wal import Wal

__all__ = ["Standby", "FENCE_EVERY"]

log = logging.getLogger("stalkd.replication")

FENCE_EVERY = 1.0  # seconds between attempts to tell the former primary about the new epoch


class Standby:
    def __init__(self, address: Address, wal: Wal, engine: Engine, role: Role, *, max_job_size: int,
                 applied: Callable[[], None], on_resync: Callable[[str], None],
                 reopened: Callable[[], None], secret: str | None = None, name: str = "",
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        """``on_resync(why)``: the local copy is lost (the server stops); ``reopened()``: the
        WAL's log was opened again (whoever holds ``wal.log`` takes the new one); ``secret``:
        the replication secret this standby proves to its primary; ``clock``: the server's
        (the TTRs of the reservations a promotion keeps run on the engine's time)."""
        self.address = address
        self.wal = wal
        self.engine = engine
        self.role = role
        self.max_job_size = max_job_size
        self.applied = applied
        self.on_resync = on_resync
        self.reopened = reopened
        self.secret = secret
        self.clock = clock
        self.receiver = Receiver(address, wal, engine, role, applied=applied, on_resync=on_resync,
                                 resync=self._resync, secret=secret, name=name)  # fmt: skip
        self._tasks: set[asyncio.Task[None]] = set()
        engine.keep_records = False  # changes come from the primary's records only

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def start(self) -> None:
        self._spawn(self.receiver.run())

    def lag(self) -> int:
        return self.receiver.lag if self.role.standby else 0

    def promote(self, epoch: int = 0) -> str:
        """Become the primary of a new epoch (at least ``epoch``: a lease's fencing token);
        returns what happened, for the operator."""
        if not self.role.standby:
            return f"already primary (epoch {self.role.state.epoch})"
        if self.role.next_epoch() > MAX_EPOCH:
            msg = f"cannot promote: epoch {self.role.next_epoch()} would take job ids past 2**53"
            log.error("%s", msg)
            return msg
        self.receiver.stop()
        at = self.wal.log.next_offset
        now = self.clock()
        # Durable before any reply under the new epoch; an fsync on the loop, once per promotion.
        self.wal.write([epoch_record(self.engine, max(self.role.next_epoch(), epoch), at, now)])
        self.wal.sync()
        self.role.standby = False
        self.role.note_promoted()
        self.engine.keep_records = True
        self.wal.reset_space(len(self.engine.jobs), self.max_job_size)
        held = self.receiver.reservations.hold(self.engine, now)
        self.applied()  # schedules the TTR ends of those jobs
        self.start_fencing()
        msg = (f"promoted: primary of epoch {self.role.state.epoch} from log offset {at} (job ids "
               f"from {self.engine.next_id}); "
               f"{held} jobs reserved on the former primary return when their TTR ends")
        log.warning("%s (the former primary %s is told at every chance)", msg, self.address)
        return msg

    async def _resync(self, why: str, since: int | None) -> None:
        """Replace the local copy with the primary's (the module doc). A failure to copy raises
        (CatchUpError, OSError) with the old copy intact; a failure to swap is fatal."""
        log.warning("%s: copying the primary's state (the local copy serves reads meanwhile)", why)
        # A resync means the primary holds a record this copy lacks: at least one of lag, known
        # before the copy learns the primary's end (which a full disk can stop it from reading).
        self.receiver.saw_end(self.wal.log.next_offset + 1)
        staging = os.path.join(self.wal.directory, RESYNC_DIR)

        loop = asyncio.get_running_loop()

        def seen(end: int) -> None:  # on the copy's thread: the loop's receiver takes it
            loop.call_soon_threadsafe(self.receiver.saw_end, end)

        def copy() -> str:
            if os.path.lexists(staging):
                shutil.rmtree(staging)  # a copy cut short earlier
            return catch_up(self.address, staging, segment_size=self.wal.segment_size, secret=self.secret,
                            on_end=seen)  # fmt: skip

        summary = await loop.run_in_executor(None, copy)
        while self.receiver.syncing:  # the local log's last fsync, still on its thread
            await asyncio.sleep(0.005)
        if not self.role.standby:  # promoted meanwhile: the local copy is the primary's now
            shutil.rmtree(staging, ignore_errors=True)
            return
        try:
            self._swap(staging, why, since)
        except BaseException as e:
            self.on_resync(f"swapping in the primary's copy from {staging} failed: {e}")
            self.receiver.stop()
            raise
        log.warning("resynced with %s without a restart: %s; the local log now ends at %d", self.address,
                    summary, self.wal.log.next_offset)  # fmt: skip

    def _swap(self, staging: str, why: str, since: int | None) -> None:
        d = self.wal.directory
        e = self.engine
        clients = [(cid, c.use.name, [t.name for t in c.watch]) for cid, c in e.conns.items()]
        cmd, total = e.command_counts(), e.total_connections
        self.wal.close()
        swap_in(d, staging, why, since)
        now = self.clock()
        e.clear()
        self.wal.reopen()
        self.wal.recover(now, max_job_size=self.max_job_size, into=e)
        for cid, use, watch in clients:  # read-only clients carry on, in the tubes they chose
            e.connect(cid, now)
            e.apply(cid, C.Use(use), now)
            for name in watch:
                e.apply(cid, C.Watch(name), now)
            if "default" not in watch:
                e.apply(cid, C.Ignore("default"), now)
        e.set_command_counts(cmd)
        e.total_connections = total
        self.reopened()
        self.applied()

    def start_fencing(self) -> None:
        """Keep telling the former primary (the ``--standby-of`` address) about this epoch."""
        self._spawn(fence(self.address, self.wal, self.role, self.secret))

    def close(self) -> None:
        self.receiver.stop()
        for t in list(self._tasks):
            t.cancel()


async def fence(a: Address, wal: Wal, role: Role, secret: str | None) -> None:
    """Tell the former primary at ``a``, whenever it answers, that a newer epoch exists: a
    request with this log's epochs, which it checks (``Role.claim``) before it steps down."""
    told = False
    while not told:
        with contextlib.suppress(OSError, ValueError, EOFError, asyncio.IncompleteReadError,
                                 asyncio.TimeoutError):  # fmt: skip
            if a.path is not None:
                reader, writer = await asyncio.open_unix_connection(a.path)
            else:
                reader, writer = await asyncio.open_connection(a.host, a.port, **connection_kwargs(a))
            try:
                st = role.state
                r = await ask(reader, writer, wire.encode_request(wal.log.next_offset, st.epoch, st.history), secret)
                told = r.word == "NOT_PRIMARY"
            finally:
                writer.close()
        if told:
            log.info("the former primary %s now refuses to act as primary", a)
            return
        await asyncio.sleep(FENCE_EVERY)
