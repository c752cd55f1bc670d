"""Promotion of a standby: the jobs the old primary had reserved stay out of reach until their
time-to-run ends, as they would have on the old primary.

A standby applies the primary's records with the recovery rules (``replay``: a reserved job is
ready, since reservations are not durable). The primary also logs each reservation and touch
(``Op.RESERVE``/``Op.TOUCH``, analytics records carrying their time), so the standby can know
which jobs were held and until when. ``Reservations.see`` follows the records; at promotion
``hold`` gives those jobs to a connection nobody speaks on (``HOLDER``): the engine's own TTR
timer then returns each one to ready (a ``TIMEOUT``, as when a worker goes silent), and until
then nobody can reserve it twice.

The new epoch itself is one EPOCH record (``epoch_record``), written at the log offset where
the epoch begins, before anything else the new primary writes.

Ensures: ``hold`` changes only jobs that are ready and whose reservation (as last recorded)
ends after ``now``; nothing is written to the WAL (the records reach it as the TTRs end).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from stalkd.engine.engine import Engine
from stalkd.engine.heap import pack
from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.objects import US, ConnState, Tube
from stalkd.engine.replay import note_epoch, replay, replay_put
from stalkd.engine.state import EngineState

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Reservations", "HOLDER", "epoch_record"]

HOLDER = -1  # the connection id of the old primary's reservations (real ones are positive)
_STARTS = (Op.RESERVE, Op.TOUCH)  # a reservation (re)starts its TTR
_ENDS = (Op.DELETE, Op.RELEASE, Op.BURY, Op.KICK, Op.TIMEOUT)
# by op code (an IntEnum indexes a tuple without hashing; its hash is a Python-level call):
# 1 a reservation starts, -1 one ends, 0 the op says nothing about reservations
_SAYS = tuple(1 if code in _STARTS else -1 if code in _ENDS else 0 for code in range(256))
_RESULT = Op.RESULT


def epoch_record(e: Engine, epoch: int, at_offset: int, now: float) -> Record:
    """The EPOCH record starting ``epoch`` at ``at_offset`` (the log offset it is written at),
    already noted in ``e.epochs``; the caller writes it before any other record.

    >>> from stalkd.engine.engine import Engine  # (compiled, the module's own name is the C type)
    >>> e = Engine(); epoch_record(e, 1, 40, 2.0).start_offset, e.epochs, e.seq
    (40, ((1, 40),), 1)
    """
    e.seq += 1
    note_epoch(e, epoch, at_offset)
    return Record(Op.EPOCH, e.seq, round(now * US), epoch=epoch, start_offset=at_offset)


class Reservations:
    """Job id -> end of its reservation on the primary (µs), from the replicated records.

    >>> from stalkd.engine.engine import Engine  # (compiled, the module's own names are C types)
    >>> from stalkd.engine.model import Record
    >>> from stalkd.protocol.commands import Put
    >>> e = Engine(); e.connect(1, 0.0); _ = e.apply(1, Put(0, 0, 60, b"x"), 0.0)
    >>> r = Reservations(); r.see(Record(Op.RESERVE, 2, 10 * US, 1), e)
    >>> r.hold(e, 20.0), e.jobs[1].state.name, e.jobs[1].deadline_us // US
    (1, 'RESERVED', 70)
    """

    def __init__(self) -> None:
        self.until: dict[int, int] = {}
        # Whether the engine needs a step (the server's ``applied``: ``tick``) after the last
        # ``follow``; see there. True until one has run: the first follow asks for one.
        self.tick_due = True
        self._followed = False

    def see(self, r: Record, e: Engine) -> None:
        """One replicated record (after ``replay`` applied it to ``e``)."""
        says = _SAYS[r.op]
        if says > 0:
            j = e.jobs.get(r.job_id)
            if j is not None:
                self.until[r.job_id] = r.time_us + j.ttr * US
        elif says < 0:
            self.until.pop(r.job_id, None)

    def follow(self, e: Engine, records: Iterable[Record | bytes]) -> bool:
        """A standby's apply step: ``replay`` each record into ``e`` in order, then ``see`` it
        (compiled, one C loop: the records' fields read in C, no Python call per record); a
        PUT's payload (bytes) is applied from it (``replay_put``).

        Returns, and keeps as ``tick_due``, whether ``e`` now needs a step (``tick``: the
        server's ``applied``, which runs what is due, serves waiters and re-arms the server's
        timer at ``next_deadline``). It does when its soonest timer came earlier (or appeared:
        a delayed put or release, a job's full state that is delayed), when a tube with waiters
        gained a ready job, when work is left for a step, and after a RESULT (a step gives back
        the memory of expired results, as a result-put does on a primary); and after the first
        follow (what the server last heard of ``e`` is unknown). Otherwise the timer the server
        has armed is still at or before ``e``'s soonest (replay only moves the others later:
        a delete, bury or kick of a delayed job), and a plain put, reserve, delete... needs no
        step: a standby then skips ``tick``'s ~1.5k instructions per read (callgrind). If a
        record raises, ``tick_due`` stays True."""
        s = e.state
        before = _soonest(s)
        self.tick_due = True
        result = False
        for x in records:
            if isinstance(x, bytes):  # a PUT's payload (frames.check_payloads): applied from it
                replay_put(e, x)
                continue
            r = x
            replay(e, r)
            if _SAYS[r.op]:
                self.see(r, e)
            elif r.op is _RESULT:
                result = True
        after = _soonest(s)
        due = (result or not self._followed or bool(s._dirty) or bool(s._pending)
               or (after is not None and (before is None or after < before)))
        self._followed = True
        self.tick_due = due
        return due

    def hold(self, e: Engine, now: float) -> int:
        """Reserve, for ``HOLDER``, every job still reserved on the old primary; returns how many."""
        now_us = round(now * US)
        if HOLDER not in e.conns:
            e.connect(HOLDER, now, internal=True)
        s = e.state
        c = s.conns[HOLDER]
        n = 0
        for jid, end in self.until.items():
            j = e.jobs.get(jid)
            if j is None or j.state is not JobState.READY or end <= now_us:
                continue
            s._detach(j)
            j.state = JobState.RESERVED
            j.owner = c
            j.deadline_us = end
            c.reserved.push(pack(end, jid), j)
            j.tube.reserved += 1
            n += 1
        self.until.clear()
        s._retime_conn(c)
        return n


@cython.locals(t=Tube, c=ConnState)
def _soonest(s: EngineState) -> int | None:
    """The engine's soonest timer (µs; None: none), as ``timers.next_deadline`` finds it."""
    t = s._tube_timers.peek()
    c = s._conn_timers.peek()
    if t is None:
        return None if c is None else c.timer_at
    if c is None or t.timer_at <= c.timer_at:
        return t.timer_at  # type: ignore[no-any-return]
    return c.timer_at  # type: ignore[no-any-return]
