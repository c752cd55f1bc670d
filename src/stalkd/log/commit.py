"""Group commit: the durable end of a log, who fsyncs it, and who waits for it.

Ensures:
  * ``durable`` only grows, and every offset below it was covered by a successful fsync (or
    by the fsynced footer of a sealed segment);
  * one caller at a time fsyncs (the leader), covering everything written when it started;
    the others wait and return as soon as the durable end covers them, so concurrent
    ``always`` appenders share fsyncs;
  * a leader waits before its fsync only for callers the previous sync just released (they are
    about to write again; the last of them to arrive fsyncs in its place), and at most
    ``gather_share`` of an average fsync: a lone caller never waits;
  * a ticket resolves once: done when the durable end passes its last offset, failed when an
    fsync fails; after that failure every later sync refuses (the page cache may have dropped
    the data, so pretending otherwise would lie about durability);
  * waiters for appends (``visibility``: threads and asyncio futures) are woken when the durable
    end grows.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

from .active import ActiveSegment
from .errors import LogError
from .gate import new_gate
from .mutex import new_mutex
from .policy import parse_durability
from .ticket import Ticket
from .visibility import Visibility
from .writer import SegmentWriter

__all__ = ["GroupCommit", "parse_durability"]

Callbacks = list[tuple[Ticket, Callable[[Ticket], object]]]
if not cython.compiled:  # compiled, commit.pxd takes these from C (no Python call, no float or int object)
    _monotonic = time.monotonic  # read per fsync: a global, not the time module's attribute
    _thread_id = threading.get_ident


class Pinner(Protocol):
    """The writer side a sync needs: the end written so far and the segment holding it."""

    next: int

    def pin_end(self) -> tuple[int, ActiveSegment]: ...

    def unpin(self, seg: ActiveSegment) -> None: ...

    def fdatasync(self, fd: int) -> None: ...


class GroupCommit:
    """The durable end of one log, its tickets, and its committer/flusher thread.

    ``policy`` is ``always`` (a committer thread resolves tickets), ``every`` (a flusher fsyncs
    at most ``interval`` seconds after a write) or ``never``.
    """

    def __init__(self, path: str, policy: str, interval: float, start: int, gather_share: float = 0.5) -> None:
        self.path = path
        self.policy = policy
        self.interval = interval
        self.durable = start
        self.failed: BaseException | None = None
        self.closed = False
        self.ok = True  # not failed and not closed: the writer's fast path reads one flag
        # Taken directly on the per-record path (no Python-level __enter__), compiled by C calls
        # (mutex.py: a threading.Lock's acquire and release are Python calls, ~430
        # instructions each; a lone durable sync took four).
        self._lock = lock = new_mutex()
        self.cond = threading.Condition(lock)  # type: ignore[arg-type]  # (any lock will do) durable progress, appends, tickets
        # The flusher thread waits here, on the same lock: notifying ``cond`` at every sync
        # woke it for nothing (two futex wake-ups and a GIL fight per sync).
        self._bg_cond = threading.Condition(lock)  # type: ignore[arg-type]
        # The committer sleeps on a plain lock used as a binary semaphore (released: "tickets
        # wait"), released only while ``_idle`` says it sleeps (both under ``_lock``). Cheaper
        # than a Condition (no waiter lock made per wait, no Python-level notify) on a path a
        # standby takes once per message.
        self._wake = new_mutex()
        self._wake.acquire()
        self._idle = False
        self._syncing = False  # a batch has a leader (guarded by cond)
        self._open: _Batch | None = None  # the batch callers join: its end is not pinned yet
        # Gathering (see _gather): how many callers the last sync released, and how many came
        # back since; the batch whose leader waits for them on its gate (the last one leads it).
        self._expect = 0
        self._arrived = 0
        # Which sync released whom: the last sync's token (its batch, or a token of the lone
        # caller's), and in each thread the token of the sync it last joined. Only callers the
        # last sync released count as arrivals: a newcomer does not stand in for one of them.
        self._released: object = None
        self._mine = threading.local()
        # The last lone sync's token and the thread that made it (0: none, or a batch was joined
        # since): that thread's local holds the token (sync_to reads it without the local).
        self._lone_token: object = None
        self._lone_thread = 0
        self._gathering: _Batch | None = None
        self.gather_share = gather_share
        self._fsync_avg = 0.0  # seconds, moving average
        self.syncs = 0  # fsyncs done (records per fsync: a count the benchmarks report)
        self._tickets: deque[Ticket] = deque()
        self._deferred: Callbacks = []
        self.visibility = Visibility(self.cond, lambda: self.closed or self.failed is not None, lock)
        self._last_sync = _monotonic()
        self._flush_due = False
        self._threads: list[threading.Thread] = []
        self._pinner: Pinner | None = None
        # The pinner when it is a log's own segment writer (a test's may be another Pinner):
        # compiled, its steps are C calls (commit.pxd), three per fsync.
        self._writer: SegmentWriter | None = None

    def start(self, pinner: Pinner) -> None:
        """Sync through ``pinner`` from now on; start the committer or flusher thread."""
        self._pinner = pinner
        self._writer = pinner if isinstance(pinner, SegmentWriter) else None
        if self.policy == "always":
            self._start_thread(self._committer, "stalkd-log-commit")
        elif self.policy == "every":
            self._start_thread(self._flusher, "stalkd-log-flush")

    # ---------------------------------------------------------------- syncing

    def sync_to(self, upto: int | None) -> int:
        """Group commit: return once everything below ``upto`` (None: what is written now) is
        durable, fsyncing it if no other caller is already doing so.

        A caller joins the open batch (the one whose end is not pinned yet) and, unless it
        leads, blocks on that batch's gate alone: it is woken once, when its batch is resolved
        or handed to it to lead, never by another batch's sync and never to fight for the lock.
        A caller alone (nobody syncing, waiting or expected back) fsyncs without a batch."""
        if upto is None and self._sync_lone():
            return self.durable
        lock = self._lock
        while True:
            # acquire/release, not ``with``: compiled, a ``with`` on a lock looks up and calls
            # __enter__ and __exit__ (~1,700 instructions under callgrind), the two method
            # calls ~400, and a durable writer comes here once per fsync.
            lock.acquire()
            try:
                if upto is None:
                    upto = self._end()
                if self.durable >= upto:
                    return self.durable
                if self.failed is not None:
                    raise LogError(f"{self.path}: log failed earlier ({self.failed})")
                ident = _thread_id()
                mine = self._mine
                if ident == self._lone_thread and self._released is self._lone_token:
                    # This thread's own token from the last sync, a lone one (no batch joined
                    # since: _join_locked clears _lone_thread), so its thread-local holds it: not
                    # read (callgrind: ~400 instructions a sync).
                    prev = self._lone_token
                else:
                    prev = getattr(mine, "sync", None)
                back = prev is self._released  # released by the last sync
                # Alone (nobody syncing, waiting or expected back: a lone writer's every sync):
                # no batch to form, gather or hand over.
                alone = not self._syncing and self._arrived + back >= self._expect
                if alone:
                    self._syncing = True
                    if back and type(prev) is object:
                        # This thread's token from its own lone sync, the last one: no other
                        # thread holds it, so it serves again, as a new one would (a lone
                        # writer's every sync; callgrind: ~850 instructions less, no object and
                        # no thread-local store per sync).
                        token = prev
                    else:
                        mine.sync = token = object()
                    self._lone_token = token
                    self._lone_thread = ident
                else:
                    b, lead = self._join_locked(back)
                    mine.sync = b
            finally:
                lock.release()
            if alone:
                self._sync_alone(token)
            elif lead:
                if self._lead(b) and b.error is not None:  # opens the gate once the batch is resolved
                    raise b.error
                if b.error is not None:  # gathered, then led by the last arrival
                    raise LogError(str(b.error))
            else:
                if not b.gate.wait():  # handed the lead; else resolved (and the next member woken)
                    if self._lead(b) and b.error is not None:
                        raise b.error
                    if b.error is not None:
                        raise LogError(str(b.error))
                else:
                    if b.error is not None:
                        raise LogError(str(b.error))  # an instance of its own: tracebacks are per raise
            durable = self.durable  # only grows: reading it unlocked can only understate it
            if durable >= upto:
                return durable
            # Covered unless ``upto`` lies past what was written when the batch was pinned (a
            # caller syncing ahead of the writes): then join the next batch.

    @cython.locals(w=SegmentWriter, end=cython.Py_ssize_t, target=cython.Py_ssize_t)
    def _sync_lone(self) -> bool:
        """``sync_to(None)`` in the steady state of a lone writer (one connection writing under
        ``always``): this thread made the last sync, alone, and since then nobody joined, syncs,
        waits or is expected back. The alone path's fsync and the state it leaves (``sync_to``,
        ``_sync_alone``, ``_synced_locked``), without its token, tuples and list, and, when no
        ticket is pending, no thread waits and no batch opened meanwhile, without resolving or
        handing anything on. False, having done nothing, when that is not the case (or the
        pinner is not the log's writer): ``sync_to``'s general path runs."""
        w = self._writer
        if w is None:
            return False
        lock = self._lock
        lock.acquire()  # (not ``with``: see sync_to)
        try:
            end = w.next
            if self.durable >= end:
                return True
            if (self.failed is not None or self._syncing or _thread_id() != self._lone_thread
                    or self._released is not self._lone_token or self._arrived + 1 < self._expect):
                return False
            self._syncing = True  # (the token, the thread and ``_released`` stay this thread's)
        finally:
            lock.release()
        target = -1
        done: tuple[Callbacks, _Batch | None] | None = None
        try:
            target = self._fsync_end()
        finally:
            lock.acquire()
            try:
                v = self.visibility
                if (target > self.durable and not self._tickets and self._open is None
                        and not v.waiters and not v.async_waiters):
                    # _synced_locked(1, target, token) with no ticket to resolve, nobody to wake
                    # and no batch to hand the lead to
                    self._expect = 1
                    self._arrived = 0
                    self.durable = target
                    self._syncing = False
                else:
                    done = self._synced_locked(1, target, self._lone_token)
            finally:
                lock.release()
            if done is not None:
                callbacks, nxt = done
                if nxt is not None:
                    nxt.gate.hand()
                for t, fn in callbacks:
                    fn(t)
        return True

    def _join_locked(self, back: bool) -> tuple[_Batch, bool]:
        """Join the open batch (opening one), ``back`` if the last sync released this caller;
        whether this caller leads it."""
        self._lone_thread = 0  # this thread's local will name a batch (see sync_to)
        b = self._open
        if b is None:
            b = self._open = _Batch()
        b.members += 1
        lead = not self._syncing
        if lead:
            self._syncing = True
        self._arrived += back
        if back and self._gathering is b and self._arrived >= self._expect:
            # The leader waits for the callers it expects on b's gate, as a member: the last of
            # them leads b at once instead of waking it (one wake-up and GIL hand-off less).
            self._gathering = None
            lead = True
        return b, lead

    def _lead(self, b: _Batch) -> bool:
        """Gather, pin the end, fsync, resolve ``b`` and hand the next open batch its lead; True.
        False if the last caller gathered led ``b`` instead (returned once it is resolved)."""
        interrupted: BaseException | None = None
        if self._arrived < self._expect:
            still, interrupted = self._gather(b)
            if not still:
                return False
        target = -1
        try:
            if interrupted is not None:
                raise interrupted
            if self.failed is not None:
                raise LogError(f"{self.path}: log failed earlier ({self.failed})")
            with self._lock:  # close b: its members all wrote before joining; later callers open the next
                if self._open is b:
                    self._open = None
            target = self._fsync_end()
        except LogError as e:
            b.error = e
        except BaseException as e:
            b.error = LogError(f"{self.path}: group commit interrupted ({e!r})")
            raise
        finally:
            with self._lock:
                if self._open is b:
                    self._open = None
                b.done = True
                callbacks, nxt = self._synced_locked(b.members, target, b)
            if nxt is not None:
                nxt.gate.hand()  # one member of the next batch leads it
            b.gate.open()
            for t, fn in callbacks:
                fn(t)
        return True

    def _sync_alone(self, token: object) -> None:
        """``sync_to`` when no other caller syncs, waits or is expected back: the fsync without
        a batch to form, gather or resolve (callers arriving meanwhile open the next one, which
        is handed its lead as in ``_lead``)."""
        target = -1
        try:
            target = self._fsync_end()
        finally:
            lock = self._lock
            lock.acquire()  # (not ``with``: see sync_to)
            try:
                callbacks, nxt = self._synced_locked(1, target, token)
            finally:
                lock.release()
            if nxt is not None:
                nxt.gate.hand()
            for t, fn in callbacks:
                fn(t)

    @cython.locals(t0=cython.double, now=cython.double, target=cython.Py_ssize_t, w=SegmentWriter)
    def _fsync_end(self) -> int:
        """Pin the end written so far, fsync it; the end. LogError (the log failed) if the fsync fails."""
        pinner = self._pinner
        if pinner is None:
            raise LogError(f"{self.path}: log is closed")
        w = self._writer  # the pinner, or None (not a writer)
        if w is not None:  # (compiled: a C call, the end a C field: no tuple, no int object)
            seg = w.pin()
            target = w.pinned
        else:
            target, seg = pinner.pin_end()
        try:
            t0 = _monotonic()
            if w is not None:  # (compiled: the segment's fd read as its C field)
                w.fdatasync(cython.cast(ActiveSegment, seg).fd)
            else:
                pinner.fdatasync(seg.fd)
            self._last_sync = now = _monotonic()
            self._fsync_avg += 0.25 * (now - t0 - self._fsync_avg)
            self.syncs += 1
        except OSError as e:
            self.fail(e)
            raise LogError(
                f"{self.path}: fsync of {seg.path} failed ({e}); the log is now failed: records from "
                f"offset {self.durable} on may be lost; reopen it to recover what is on disk"
            ) from e
        finally:
            if w is not None:
                w.unpin(seg)
            else:
                pinner.unpin(seg)
        return target

    def _synced_locked(self, members: int, target: int, token: object) -> tuple[Callbacks, _Batch | None]:
        """A sync of ``members`` callers ended at ``target`` (-1: failed): advance, and whether
        the next open batch has members to hand the lead to (the caller releases its gate)."""
        # Everyone this sync releases (the leader too) is about to write again.
        self._expect = members
        self._arrived = 0
        self._released = token
        callbacks = self._advance_locked(target) if target >= 0 else []
        nxt = self._open
        handoff = nxt is not None and nxt.members > 0
        self._syncing = handoff
        return callbacks, nxt if handoff else None

    def _gather(self, b: _Batch) -> tuple[bool, BaseException | None]:
        """The leader of ``b``, before pinning the end: wait briefly for the callers the last
        sync released, so this fsync covers their next records too. (Whether this caller still
        leads ``b``, and what interrupted its wait if anything.)

        Without this, the released leader writes again and starts the next fsync alone before
        the threads it woke have had the GIL back; they then share the fsync after that, and
        N concurrent appenders settle into alternating batches of 1 and N-1. The leader waits
        on ``b``'s gate: the last expected arrival leads ``b`` itself (see _join_locked) and the
        gate wakes this caller as a member once ``b`` is resolved. After ``gather_share`` of an
        average fsync (a caller that stopped appending costs one such wait, and is not expected
        again) this caller leads, unless the lead was taken meanwhile."""
        with self._lock:
            if self._arrived >= self._expect or self.gather_share <= 0 or self.closed or self.failed is not None:
                return True, None
            self._gathering = b
        got: bool | None = None
        interrupted: BaseException | None = None
        try:
            got = b.gate.wait(self.gather_share * self._fsync_avg)
        except BaseException as e:
            interrupted = e
        with self._lock:
            still = self._gathering is b
            if still:
                self._gathering = None
        if still or got is False:  # the time ran out, or handed the lead (close or failure: _stop_gathering)
            return True, interrupted
        if interrupted is not None:  # the last arrival leads b: it is resolved without this caller
            raise interrupted
        if got is None and b.gate.wait() is False:  # the time ran out as the lead was taken
            return True, None
        return False, None

    def _stop_gathering_locked(self) -> None:
        """Closed or failed: the callers a leader gathers for may never come, so whoever waits
        on that batch's gate first leads it now (and finds the log closed or failed)."""
        b, self._gathering = self._gathering, None
        if b is not None:
            b.gate.hand()

    def sealed(self, end: int) -> None:
        """A segment's footer was fsynced: everything below ``end`` is durable. Called under
        the writer's lock, so ticket callbacks wait for :meth:`run_deferred`."""
        with self.cond:
            self._deferred.extend(self._advance_locked(end))

    def run_deferred(self) -> None:
        """Run the ticket callbacks ``sealed`` held back (outside the writer's lock: they may append)."""
        if self._deferred:
            with self.cond:
                todo, self._deferred = self._deferred, []
            for t, fn in todo:
                fn(t)

    @cython.locals(t=Ticket)
    def _advance_locked(self, target: int) -> Callbacks:
        out: Callbacks = []
        if target > self.durable:
            self.durable = target
            tickets = self._tickets
            while tickets and tickets[0].last < target:
                t = tickets.popleft()
                for fn in t._resolve(None):  # (a loop: compiled, a generator is an object per call)
                    out.append((t, fn))
            # Who waits on ``cond`` for progress: threads in a ticket's wait or in
            # wait_visible, both counted in ``waiters`` (callbacks need no wake-up).
            v = self.visibility
            if v.waiters:
                self.cond.notify_all()
            if v.async_waiters:
                v.wake_async_locked()
        return out

    def fail(self, exc: BaseException) -> None:
        """The log can no longer promise durability: fail pending tickets, refuse from now on."""
        callbacks: Callbacks = []
        with self.cond:
            if self.failed is None:
                self.failed = exc
            self.ok = False
            err = LogError(f"{self.path}: log failed: {exc}")
            while self._tickets:
                t = self._tickets.popleft()
                callbacks.extend((t, fn) for fn in t._resolve(err))
            self.cond.notify_all()
            self._stop_gathering_locked()
        for t, fn in callbacks:
            fn(t)

    # ---------------------------------------------------------------- after a write

    def ticket(self, first: int, last: int) -> Ticket:
        """A ticket for offsets ``first..last`` just written; the committer resolves it."""
        if self.policy != "always":
            return Ticket(first, last, self.visibility, done=True)
        lock = self._lock
        lock.acquire()  # (not ``with``: see sync_to; a standby asks once per message)
        try:
            t = Ticket(first, last, self.visibility, done=self.durable > last)
            if not t._done:
                self._tickets.append(t)
                self._wake_committer_locked()
        finally:
            lock.release()
        return t

    def call_when_durable(self, end: int, fn: Callable[[Ticket], object]) -> Ticket:
        """``ticket(end - 1, end - 1)`` with ``fn`` as its done callback, in one step under the
        lock: ``fn(ticket)`` once every offset below ``end`` is durable, on the committer thread
        (here, at once, if it already is). A standby asks once per read its committer fsyncs:
        ``Log.ticket`` and ``add_done_callback`` took the lock twice, through a Python-level
        ``with`` for the second."""
        last = end - 1
        if self.policy == "always":
            lock = self._lock
            lock.acquire()  # (not ``with``: see sync_to)
            try:
                done = self.durable > last
                t = Ticket(last, last, self.visibility, done=done)
                if not done:  # (read here, under the lock: the committer may resolve t once it is released)
                    t._callbacks.append(fn)
                    self._tickets.append(t)
                    self._wake_committer_locked()
            finally:
                lock.release()
            if not done:
                return t
        else:
            t = Ticket(last, last, self.visibility, done=True)
        fn(t)
        return t

    def _wake_committer_locked(self) -> None:
        if self._idle:
            self._idle = False
            self._wake.release()

    def wake_flusher(self) -> None:
        """Under ``every``: wake the flusher now if a flush is due."""
        if not self._flush_due and _monotonic() - self._last_sync >= self.interval:
            # Wake the flusher now rather than at its next timed wake-up: a thread sleeping on a
            # timer is starved by a busy writer (GIL switch interval), one notified is not, since
            # every append releases the GIL in its write system call.
            with self.cond:
                self._flush_due = True
                self._bg_cond.notify()

    # ---------------------------------------------------------------- threads and closing

    def _committer(self) -> None:
        lock = self._lock
        while True:
            lock.acquire()
            try:
                waiting = bool(self._tickets)
                if not waiting:
                    if self.closed:
                        return
                    self._idle = True
            finally:
                lock.release()
            if not waiting:
                self._wake.acquire()  # released by ticket() or close()
                continue
            try:
                self.sync_to(None)
            except LogError:
                return

    def _flusher(self) -> None:
        while True:
            with self.cond:
                if not self._flush_due:
                    self._bg_cond.wait(self.interval)
                if self.closed:
                    return
                self._flush_due = False
            if self._end() > self.durable:
                try:
                    self.sync_to(None)
                except LogError:
                    return

    def _end(self) -> int:
        w = cython.declare(SegmentWriter, self._writer)
        if w is not None:  # compiled: its C field, as an int (no call of ``int``: ~500 instructions)
            end: int = w.next
            return end
        pinner = self._pinner
        return self.durable if pinner is None else pinner.next

    def _start_thread(self, target: Callable[[], None], name: str) -> None:
        th = threading.Thread(target=target, name=name, daemon=True)
        th.start()
        self._threads.append(th)

    def close(self) -> None:
        """Stop the background thread (after the caller's last sync) and wake every waiter."""
        with self.cond:
            self.closed = True
            self.ok = False
            self.cond.notify_all()
            self._bg_cond.notify_all()
            self._wake_committer_locked()
            self._stop_gathering_locked()
        for th in self._threads:
            if th is not threading.current_thread():
                th.join()
        self._threads.clear()

    def release(self) -> None:
        """Mark closed and wake everyone, without joining (what a crash leaves)."""
        with self.cond:
            self.closed = True
            self.ok = False
            self._pinner = None
            self._writer = None
            self.cond.notify_all()
            self._bg_cond.notify_all()
            self._wake_committer_locked()
            self._stop_gathering_locked()


class _Batch:
    """Callers one fsync covers. Its members wait on ``gate`` (see gate.py): handed to one of
    them to lead when the previous batch resolves while it has members, opened once resolved."""

    __slots__ = ("gate", "members", "done", "error")

    def __init__(self) -> None:
        self.gate = new_gate()
        self.members = 0
        self.done = False
        self.error: LogError | None = None
