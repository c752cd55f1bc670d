"""Durability barriers: the WAL batch each reply waits for, and group commit.

The records of one loop iteration form one batch, written to the WAL with one call at the start
of the next iteration (one ``write(2)`` for a whole pipeline). A reply is tagged with the number
of the batch its records belong to (its *barrier*) and held until that batch is durable. With
``never``/``every:<ms>`` a batch is durable once written; with ``always`` one ``storage.sync()``
per batch runs on the sync thread (``Syncer``) while the loop keeps reading and running
commands. Only one sync runs at a time, so batches grow with load (group commit).

Deliberate exception: when one connection alone has written the last ``INLINE_AFTER`` batches,
its batch is written at the end of its step (under any policy: no other connection's records
could join it, so the loop callback would only add work) and, with ``always``, fsynced inline on
the loop thread: that client waits for the fsync and nobody else is writing, so the thread
hand-off would only add latency. Readers on other connections wait at most one fsync; a second
writer ends it at once.

Records nothing waits for (the analytics-only reserve, touch and timeout: not durable, a reply
never holds for them) do not make a batch of their own: they stay in ``pending`` and go out with
the next batch that holds a durable record (a reserve with the delete that follows it: one WAL
write a job rather than two), or ``LAZY_WRITE`` seconds later at the latest. They keep their
order and their time; what a crash loses of them is what it would lose of a reservation anyway
(it is not durable: the job comes back ready). Not while a standby streams: it learns which
jobs are reserved from these records, for its promotion (engine/handover.py), so they go out
with their own batch as soon as they are made.

Second exception, for several writers: ``SyncPolicy`` (syncpolicy.py) measures the thread's
hand-off and the fsync, and runs the fsync inline while it costs no more than the hand-off and
at most 1 ms. A slow or stalling disk stays on the thread, and one sync in 65 runs there to
re-measure the hand-off. (Figures: bench/server_bench.py ``--peer-src`` and the commit notes.)

Ensures:
- ``durable <= written``; a reply tagged ``b`` is released only once ``durable >= b``.
- A job body is never shown before the job's own records are durable (``job_barrier``);
  other connections' unsynced writes do not hold it back.
- A write or sync failure is reported to ``on_fatal`` and nothing held behind it is released.
- With a ``gate`` (``--sync-standbys N``, ``stalkd.replication.gate``) a batch is durable once
  it is durable here *and* the gate says N standbys hold it: the same batches, one more
  condition, so standby acknowledgements are grouped exactly like local fsyncs.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence, Sized
from typing import TYPE_CHECKING, Protocol

from stalkd.engine.model import DURABLE_OPS, Record
from stalkd.replication.gate import SyncGate
from stalkd.server.storage import FatalStorageError, Storage
from stalkd.server.syncer import Syncer
from stalkd.server.syncpolicy import SyncPolicy

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Barriers", "HeldReplies", "INLINE_AFTER", "LAZY_WRITE", "SWITCH_INTERVAL"]

SWITCH_INTERVAL = 0.0005  # seconds; see _start_sync
# Job barriers already durable that may stay in the map before it is pruned (see _reached).
JOB_PRUNE_AT = 1024
# Batches in a row from one connection after which its fsyncs run inline (see _start_sync).
INLINE_AFTER = 8
# Seconds at most before records nothing waits for (reserve, touch, timeout) are written when no
# durable record comes to take them along (see the module's docstring): the mark's period.
LAZY_WRITE = 0.1
# DURABLE_OPS by op code, as a C-level tuple: an IntEnum indexes it without hashing (a frozenset
# look-up hashes it, a Python-level call per record).
_DURABLE = cython.declare(tuple, tuple(code in DURABLE_OPS for code in range(256)))
# INLINE_AFTER as a C constant: compared per batch with C ints (a Python int cost a PyLong a put).
_INLINE_AFTER = cython.declare(cython.Py_ssize_t, INLINE_AFTER)


def _no_offset() -> int:
    return 0


@cython.cclass
class HeldReplies:
    """A connection holding replies behind a barrier, as the barriers see it: the base of
    ``stalkd.server.connection.Connection`` (a class rather than a protocol so that, compiled,
    ``release_held`` reaches ``release`` as a C call: barriers.pxd declares it, and
    connection.pxd cannot be cimported here, since it cimports this module)."""

    def release(self, durable: int) -> None:
        """Batches up to ``durable`` are durable: send the replies now due, ``unhold`` once
        none is left, and run what was read if the connection had stopped for them."""
        raise NotImplementedError

    def replace_held(self, parts: tuple[bytes, ...]) -> None:
        """Every held reply becomes ``parts``, due at once (``abandon``)."""
        raise NotImplementedError

    def abort(self) -> None:
        """Drop the held replies unsent and cut the connection (``abandon``)."""
        raise NotImplementedError


class ReplicaGate(Protocol):
    """The batches standbys hold durable (``stalkd.replication.gate.SyncGate``)."""

    replicated: int

    def note(self, batch: int, end_offset: int) -> None: ...


@cython.cclass
class Barriers:
    """Batches of records on their way to disk, and the replies waiting for them.

    >>> from stalkd.server.storage import MemoryStorage
    >>> b = Barriers(MemoryStorage(), group_commit=False, loop=lambda: None, on_fatal=print)
    >>> b.written, b.durable
    (0, 0)
    """

    # The state: C fields when compiled, with the C methods, declared in barriers.pxd (readable and
    # writable from Python as attributes).
    storage: Storage
    _write: Callable[[Sequence[Record]], None]
    _sync: Callable[[], None]
    keeps: bool
    group_commit: bool
    _loop: Callable[[], asyncio.AbstractEventLoop | None]
    _on_fatal: Callable[[BaseException], None]
    failed: bool
    written: int
    durable: int
    local_durable: int
    gate: ReplicaGate | None
    end_offset: Callable[[], int]
    after_write: Callable[[], None] | None
    after_write_while: Sized | None
    after_batch: Callable[[], None] | None
    _batch_open: bool
    pending: list[Record]
    _flush_scheduled: bool
    _lazy_timer: asyncio.TimerHandle | None
    _steps: int
    _step_records: bool
    _releasing: bool
    _writer: object | None
    _mixed: int
    _syncer: Syncer | None
    sync_policy: SyncPolicy
    _holder: HeldReplies | None
    _held: set[HeldReplies]
    _job_batch: dict[int, int]
    _job_last: int
    _job_prune_at: int
    syncs: int
    inline_syncs: int

    def __init__(
        self,
        storage: Storage,
        *,
        group_commit: bool,
        loop: Callable[[], asyncio.AbstractEventLoop | None],
        on_fatal: Callable[[BaseException], None],
    ) -> None:
        self.storage = storage
        # A WAL's write and sync are its compiled per-batch object's (``Wal.batches``), looked
        # up once.
        steps = getattr(storage, "batches", storage)
        self._write = steps.write
        self._sync = steps.sync
        self.keeps = storage.persistent  # False: records are dropped, replies never wait
        self.group_commit = group_commit
        self._loop = loop
        self._on_fatal = on_fatal
        self.failed = False
        # ``written`` counts loop iterations that produced durable records, ``durable`` the
        # last one on disk under the policy. A reply tagged with batch N is held until
        # ``durable >= N``.
        self.written = 0
        self.durable = 0
        self.local_durable = 0  # durable on this disk (``durable`` also waits for the gate)
        # --sync-standbys: the gate, and the log's end offset after a write (set together).
        self.gate = None
        self.end_offset = _no_offset
        self.after_write = None  # records reached the log (shipping)
        # after_write runs only while this is non-empty (None: always): the standbys connected,
        # so a primary without one pays no call per batch.
        self.after_write_while = None
        # after a batch is written and noted: replies waiting for a standby's acknowledgement
        # may be released here (Replicas.poll_acks), as an inline fsync releases its own
        self.after_batch = None
        self._batch_open = False  # records of this loop iteration go into batch ``written``
        self.pending = []  # records of this loop iteration, not yet written
        self._flush_scheduled = False
        self._lazy_timer = None  # writes ``pending`` LAZY_WRITE after records nothing waits for
        self._steps = 0  # connections inside a step (nested when a release runs one)
        self._step_records = False  # a step produced records: end_step writes or schedules them
        self._releasing = False  # inside release_held: steps it runs never write inline
        # The last connection that wrote durable records, and the last batch another one did.
        self._writer = None
        self._mixed = 0
        self._syncer = None  # the fsync thread (``always``), started on first use
        self.sync_policy = SyncPolicy()  # several writers: fsync on the thread or inline
        # The connections holding replies: the first in ``_holder`` and only the others in
        # ``_held`` (a lone writer holds and is released once a put: a set add and discard cost
        # ~300 instructions a put, a C field ~20).
        self._holder = None
        self._held = set()
        # Job id -> the batch holding its latest durable record (a job is shown only after its
        # own records are durable). An entry whose batch is durable says nothing (job_barrier
        # compares), so entries are not dropped one by one as batches become durable (a deque
        # in batch order cost ~1k instructions a put): the map is pruned at once when it
        # passes ``_job_prune_at`` entries (see _reached). ``_job_last``: the newest entry's batch.
        self._job_batch = {}
        self._job_last = 0
        self._job_prune_at = JOB_PRUNE_AT
        self.syncs = 0  # completed group commits (stats for the bench and tests)
        self.inline_syncs = 0  # of which run on the loop thread

    def _soon(self, callback: Callable[[], object]) -> None:
        loop = self._loop()
        assert loop is not None
        loop.call_soon(callback)

    # --- what connections and the server tell us ----------------------------------------------

    def hold(self, c: HeldReplies) -> None:
        """``c`` has replies waiting for a barrier."""
        holder = self._holder
        if holder is c:
            return
        if holder is None and not self._held:
            self._holder = c  # (``c`` is never both here and in the set)
        else:
            self._held.add(c)

    def unhold(self, c: HeldReplies) -> None:
        """``c`` holds no reply any more (``release_held`` moved its last one out)."""
        if self._holder is c:
            self._holder = None
        elif self._held:
            self._held.discard(c)

    def holders(self) -> list[HeldReplies]:
        """The connections holding replies now."""
        held: list[HeldReplies] = list(self._held)
        if self._holder is not None:
            held.append(self._holder)
        return held

    def forget(self, c: HeldReplies) -> None:
        """``c`` is gone: keep nothing of it alive."""
        self.unhold(c)
        if self._writer is c:
            self._writer = None  # the next writer is "another"

    def begin_step(self) -> None:
        """A connection starts running the commands it has read."""
        self._steps += 1

    def end_step(self) -> None:
        """A connection ran what it had read. A lone writer's records are written (and under
        ``always`` fsynced inline) now: nobody else's can join its batch, and this saves a loop
        callback before its replies leave. Otherwise at the start of the next iteration, so
        every connection read in this one shares one WAL write (each ``Wal.write`` call has a
        fixed cost) and, with ``always``, one fsync."""
        self._steps -= 1
        if self._steps or not self._step_records:
            return
        self._step_records = False
        if self.written - self._mixed >= _INLINE_AFTER:
            self._close_batch()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._soon(self._close_batch)

    def add(self, c: object | None, records: Sequence[Record]) -> int:
        """Queue one command's records (``c``'s, None for a timer); the barrier its replies
        wait for (0: nothing durable among them)."""
        if not self.keeps:
            return 0
        self.pending.extend(records)
        barrier = 0
        job_batch = self._job_batch
        for r in records:
            rec = cython.declare(Record, r)  # compiled: its C fields
            code = cython.declare(cython.Py_ssize_t, rec.op)
            if _DURABLE[code]:
                if not barrier:
                    # The batch this loop iteration's durable records (``c``'s) belong to.
                    if not self._batch_open:
                        self._batch_open = True
                        self.written += 1
                    if c is not self._writer:
                        self._writer = c
                        self._mixed = self.written
                    barrier = self.written
                jid = rec.job_id
                if jid:
                    job_batch[jid] = barrier
                    self._job_last = barrier
        if barrier or (self.after_write is not None
                       and (self.after_write_while is None or self.after_write_while)):
            # (records nothing waits for go out at once too while a standby streams: it learns
            # from them which jobs are reserved, should it be promoted: engine/handover.py)
            if self._steps and not self._releasing:
                self._step_records = True  # end_step decides: write now, or next iteration
            elif not self._flush_scheduled:
                self._flush_scheduled = True
                self._soon(self._close_batch)
        elif self._lazy_timer is None:
            # Nothing waits for these: the next durable batch takes them along, else the timer
            # (armed once per LAZY_WRITE at most, never cancelled: a batch that took them
            # along leaves it nothing to do).
            loop = self._loop()
            assert loop is not None
            self._lazy_timer = loop.call_later(LAZY_WRITE, self._lazy_write)
        return barrier

    def _lazy_write(self) -> None:
        """LAZY_WRITE after records nothing waits for: write them if no batch took them along."""
        self._lazy_timer = None
        self.write_pending()

    def write_pending(self) -> None:
        """Write the records waiting for a batch now (between steps: the WAL compacts only once
        every record the engine made is written)."""
        if self.pending and not self._flush_scheduled and not self._steps and not self.failed:
            self._close_batch()

    @cython.locals(b=cython.Py_ssize_t)
    def job_barrier(self, job_id: int) -> int:
        """The batch holding ``job_id``'s latest durable record while not yet durable, else 0."""
        b = self._job_batch.get(job_id, 0)
        return b if b > self.durable else 0

    # --- group commit ------------------------------------------------------------------------

    def _close_batch(self) -> None:
        """Next loop iteration: one WAL write for every record of the last one, then (``always``)
        one fsync for all of them off the loop thread, or (``never``/``every``) release now:
        the records are in the kernel, which is what those policies promise."""
        self._flush_scheduled = False
        records, self.pending = self.pending, []
        if records and not self.failed:
            try:
                self._write(records)
            except Exception as e:
                self._write_failed(e)
                return
            if self.after_write is not None and (self.after_write_while is None or self.after_write_while):
                self.after_write()
        if not self._batch_open:
            return
        self._batch_open = False
        self._batch_written()
        if self.after_batch is not None:
            self.after_batch()

    def _write_failed(self, e: Exception) -> None:
        # The engine already applied these changes and memory now runs ahead of the WAL:
        # nothing of the batch is acknowledged and the server stops rather than diverge
        # further. (A full disk fails single commands before this, see admission.py; this is
        # an I/O error.)
        self._fail(FatalStorageError(f"WAL write failed: {e}"))

    def _batch_written(self) -> None:
        """The batch is in the log: tell the gate, then sync it or (no fsync) release it."""
        gate = self.gate
        if gate is not None:
            if type(gate) is SyncGate:  # the --sync-standbys gate itself: a C call (compiled)
                cython.cast(SyncGate, gate).note(self.written, self.end_offset())
            else:  # a wrapper (replication/authority.py's, while it may withhold)
                gate.note(self.written, self.end_offset())
        if self.group_commit:
            self._start_sync()
        else:
            self._reached(self.written)

    def _start_sync(self) -> None:
        syncer = self._syncer
        if (syncer is not None and syncer.busy) or self.local_durable >= self.written or self.failed:
            return
        lone = self.written - self._mixed >= _INLINE_AFTER
        if lone or self.sync_policy.inline():
            # One client alone is writing (the last INLINE_AFTER batches were all its own): it
            # waits for this fsync and nobody else has anything to run meanwhile, so a thread
            # hand-off only adds latency (two wake-ups, a GIL hand-back). A second writer
            # switches back to the thread at once (its first batch). Or several write and the
            # policy measured the hand-off dearer than the fsync (see SyncPolicy).
            target = self.written
            t0 = 0.0 if lone else time.perf_counter()
            try:
                self._sync()
            except Exception as e:
                self._synced(target, e)
                return
            if not lone:
                self.sync_policy.inline_done(time.perf_counter() - t0)
            self.inline_syncs += 1
            self._synced(target, None)
            return
        if syncer is None:
            loop = self._loop()
            assert loop is not None
            syncer = self._syncer = Syncer(self._sync, self._synced, loop,
                                           timing=self.sync_policy.thread_done)
            # When fsync returns, the sync thread must win the GIL back from a busy loop thread;
            # the default 5 ms switch interval would add up to 5 ms to every acknowledgement.
            sys.setswitchinterval(SWITCH_INTERVAL)
        syncer.request(self.written)

    def _synced(self, target: int, exc: BaseException | None) -> None:
        if exc is not None:
            self._fail(FatalStorageError(f"WAL sync failed: {exc}"))
            return
        self.syncs += 1
        self._reached(target)
        if self.written > self.local_durable and not self._batch_open:
            self._start_sync()

    @cython.locals(replicated=cython.Py_ssize_t)
    def _reached(self, target: int) -> None:
        """Batches up to ``target`` are durable on this disk: release what the gate allows."""
        self.local_durable = target
        gate = self.gate
        if gate is not None:
            # the --sync-standbys gate's figure is a C field (compiled), a wrapper's an attribute
            replicated = cython.cast(SyncGate, gate).replicated if type(gate) is SyncGate else gate.replicated
            if replicated < target:
                target = replicated
            if target <= self.durable:
                return
        self.durable = target
        if len(self._job_batch) > self._job_prune_at:
            self._prune_jobs(target)
        self.release_held()

    def _prune_jobs(self, target: int) -> None:
        """Drop the job barriers of batches up to ``target`` (durable: they hold nothing back).
        The next prune waits until the map has doubled past what is kept, so each entry is
        looked at a bounded number of times however far durability lags (a gate)."""
        if target >= self._job_last:
            self._job_batch.clear()  # every entry is durable (always so for a lone writer)
            kept = 0
        else:
            self._job_batch = {j: b for j, b in self._job_batch.items() if b > target}
            kept = len(self._job_batch)
        self._job_prune_at = max(JOB_PRUNE_AT, 2 * kept)

    def replicated(self) -> None:
        """The gate moved (a standby acknowledged): release what is now durable everywhere."""
        if not self.failed:
            self._reached(self.local_durable)

    def _fail(self, e: BaseException) -> None:
        self.failed = True
        self._on_fatal(e)

    @cython.locals(durable=cython.Py_ssize_t, c=HeldReplies)  # compiled: c.release is a C call
    def release_held(self) -> None:
        """Send every held reply whose batch is durable; let those connections run again."""
        durable = self.durable
        self._releasing = True
        try:
            if not self._held:
                # One holder (a lone writer), or none: no list of holders built (callgrind:
                # ~600 instructions a release). Its release may ``unhold`` it.
                if self._holder is not None:
                    c = self._holder
                    c.release(durable)
            else:
                for c in self.holders():
                    c.release(durable)  # its replies due sent (``unhold`` once none is left), it runs again
        finally:
            self._releasing = False
        if self._step_records:
            # Records of the commands those connections ran: the next iteration writes them.
            self._step_records = False
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._soon(self._close_batch)

    def abandon(self, parts: tuple[bytes, ...] | None) -> None:
        """This server may no longer acknowledge (a newer epoch fenced it). ``parts`` (a
        ``NOT_PRIMARY``): no standby can hold the writes behind the held replies, so every held
        reply becomes it and goes out now. None: their writes may be on the standby promoted in
        its place, so neither an acknowledgement nor ``NOT_PRIMARY`` (which tells a client
        nothing was applied, so it resends) would be true: every connection holding a reply is
        cut, unanswered, which is what says "outcome unknown". The caller has frozen the gate,
        so nothing written later is acknowledged either."""
        if parts is not None:
            for c in self.holders():
                c.replace_held(parts)
            self.release_held()
            return
        held = self.holders()
        self._holder, self._held = None, set()
        for c in held:
            c.abort()

    async def wait_durable(self, timeout: float) -> bool:
        """Wait until everything written so far is durable (used when stopping)."""
        deadline = time.monotonic() + timeout
        if self.pending and not self.failed:
            self._close_batch()  # records nothing waits for, left for a later batch
        while self.local_durable < self.written and not self.failed:
            if self.pending or self._batch_open:
                self._close_batch()
            self._start_sync()
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)  # poll: the sync's done-callback advances ``durable``
        return not self.failed

    def stop(self) -> None:
        """Stop the sync thread (after the last sync)."""
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
            self._lazy_timer = None
        if self._syncer is not None:
            self._syncer.stop()
