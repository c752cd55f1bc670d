"""Shared helpers for WAL tests: drive an engine + WAL together and compare durable states."""

from __future__ import annotations

import random
from typing import Any

from stalkd.engine import Engine, Outcome
from stalkd.engine.replay import durable_record
from stalkd.persist.wal import Wal
from stalkd.protocol import commands as C

T0 = 1_700_000_000.0


def durable_view(e: Engine) -> tuple[Any, ...]:
    """Everything a restart must reproduce: each job's durable record (seq blanked), the
    buried FIFO order per tube, and that ids continue."""
    jobs = tuple(durable_record(e.jobs[i], 0) for i in sorted(e.jobs))
    buried = tuple(sorted((t.name, tuple(t.buried)) for t in e.tube_order if t.buried))
    return jobs, buried


class Driver:
    """An engine whose every outcome is written (and synced) to a WAL, like the server does."""

    def __init__(self, wal: Wal, engine: Engine, now: float = T0) -> None:
        self.wal = wal
        self.e = engine
        self.now = now
        self.acked = 0

    def _out(self, out: Outcome) -> Outcome:
        self.wal.write(out.records)
        self.wal.sync()
        self.acked += 1
        return out

    def do(self, cid: int, cmd: C.Command) -> C.AnyReply | None:
        if cid not in self.e.conns:
            self.e.connect(cid, self.now)
        if self.e.conns[cid].waiting:
            return None
        return self._out(self.e.apply(cid, cmd, self.now)).reply

    def tick(self, dt: float) -> None:
        self.now += dt
        self._out(self.e.tick(self.now))

    def disconnect(self, cid: int) -> None:
        self._out(self.e.disconnect(cid, self.now))


def random_step(d: Driver, rng: random.Random) -> None:
    """One random command (or clock move) exercising every durable op."""
    cid = rng.randint(1, 3)
    jid = rng.randint(max(1, d.e.next_id - 30), d.e.next_id)
    k = rng.random()
    if k < 0.25:
        d.do(cid, C.Put(rng.choice([0, 5, 2000]), rng.choice([0, 0, 1, 30]), rng.choice([1, 2, 60]),
                        rng.randbytes(rng.randint(0, 40))))  # fmt: skip
    elif k < 0.40:
        d.do(cid, C.ReserveWithTimeout(0))
    elif k < 0.47:
        d.do(cid, C.ReserveJob(jid))
    elif k < 0.55:
        d.do(cid, C.Delete(jid))
    elif k < 0.65:
        d.do(cid, C.Release(jid, rng.choice([1, 7]), rng.choice([0, 0, 2, 40])))
    elif k < 0.72:
        d.do(cid, C.Bury(jid, rng.choice([3, 9])))
    elif k < 0.76:
        d.do(cid, C.Kick(rng.randint(1, 3)))
    elif k < 0.79:
        d.do(cid, C.KickJob(jid))
    elif k < 0.82:
        d.do(cid, C.Touch(jid))
    elif k < 0.88:
        d.do(cid, C.Use(rng.choice(["default", "a", "b"])))
    elif k < 0.91:
        d.do(cid, C.Watch(rng.choice(["a", "b"])))
    elif k < 0.93:
        if cid in d.e.conns:
            d.disconnect(cid)
    else:
        d.tick(rng.choice([0.5, 1.0, 3.0]))
