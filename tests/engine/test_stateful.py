"""Random command sequences and clock jumps: the engine against a naive reference model."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from stalkd.engine import Engine
from stalkd.protocol import commands as C
from stalkd.protocol.commands import AnyReply, Close, JobReply, Reply

from .refmodel import US, Ref

T0 = 1_700_000_000.0
CONNS = st.integers(1, 3)
TUBES = st.sampled_from(["default", "a", "b"])
IDS = st.integers(1, 12)
PRI = st.sampled_from([0, 1, 5, 1023, 1024, 2**32 - 1])
SECS = st.integers(0, 3)


def norm(r: AnyReply | None) -> Any:
    if r is None:
        return None
    if isinstance(r, JobReply):
        return (r.word, r.id, r.body)
    if isinstance(r, Close):
        return ("CLOSE",)
    assert isinstance(r, Reply), r
    return (r.word, *r.args)


class EngineVsRef(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.e = Engine()
        self.ref = Ref()
        self.t_us = round(T0 * US)
        self.ref.now = self.t_us
        self.body_n = 0
        self.stale = False  # the clock moved and nobody has called the engine since

    @property
    def now(self) -> float:
        return self.t_us / US

    def _conn(self, cid: int) -> bool:
        """Connect on first use; False if the connection is blocked in reserve."""
        if cid not in self.e.conns:
            self.e.connect(cid, self.now)
            self.ref.connect(cid)
        return not self.ref.conns[cid].waiting

    def _check(self, out: Any, ref_reply: Any, cid: int | None) -> None:
        self.stale = False
        self.ref.settle()
        woken = [(c, r) for c, r in self.ref.wakeups]
        self.ref.wakeups.clear()
        if cid is not None and ref_reply is None:
            own = [r for c, r in woken if c == cid]
            if own:
                ref_reply = own[0]
                woken = [(c, r) for c, r in woken if c != cid]
        if cid is not None:
            assert norm(out.reply) == ref_reply
        assert sorted((c, norm(r)) for c, r in out.wakeups) == sorted(woken)

    def _cmd(self, cid: int, cmd: C.Command, ref_call: Any) -> None:
        if not self._conn(cid):
            return
        self.ref.settle()  # the engine runs due timers before a command
        pre = list(self.ref.wakeups)
        self.ref.wakeups.clear()
        out = self.e.apply(cid, cmd, self.now)
        ref_reply = ref_call()
        self.ref.wakeups[:0] = pre
        self._check(out, ref_reply, cid)

    @rule(cid=CONNS, pri=PRI, delay=SECS, ttr=SECS)
    def put(self, cid: int, pri: int, delay: int, ttr: int) -> None:
        self.body_n += 1
        body = b"j%d" % self.body_n
        self._cmd(cid, C.Put(pri, delay, ttr, body), lambda: self.ref.put(cid, pri, delay, ttr, body))

    @rule(cid=CONNS, timeout=st.none() | SECS)
    def reserve(self, cid: int, timeout: int | None) -> None:
        cmd: C.Command = C.Reserve() if timeout is None else C.ReserveWithTimeout(timeout)
        self._cmd(cid, cmd, lambda: self.ref.reserve(cid, timeout))

    @rule(cid=CONNS, jid=IDS)
    def reserve_job(self, cid: int, jid: int) -> None:
        self._cmd(cid, C.ReserveJob(jid), lambda: self.ref.reserve_job(cid, jid))

    @rule(cid=CONNS, jid=IDS)
    def delete(self, cid: int, jid: int) -> None:
        self._cmd(cid, C.Delete(jid), lambda: self.ref.delete(cid, jid))

    @rule(cid=CONNS, jid=IDS, pri=PRI, delay=SECS)
    def release(self, cid: int, jid: int, pri: int, delay: int) -> None:
        self._cmd(cid, C.Release(jid, pri, delay), lambda: self.ref.release(cid, jid, pri, delay))

    @rule(cid=CONNS, jid=IDS, pri=PRI)
    def bury(self, cid: int, jid: int, pri: int) -> None:
        self._cmd(cid, C.Bury(jid, pri), lambda: self.ref.bury(cid, jid, pri))

    @rule(cid=CONNS, jid=IDS)
    def touch(self, cid: int, jid: int) -> None:
        self._cmd(cid, C.Touch(jid), lambda: self.ref.touch(cid, jid))

    @rule(cid=CONNS, bound=st.integers(0, 4))
    def kick(self, cid: int, bound: int) -> None:
        self._cmd(cid, C.Kick(bound), lambda: self.ref.kick(cid, bound))

    @rule(cid=CONNS, jid=IDS)
    def kick_job(self, cid: int, jid: int) -> None:
        self._cmd(cid, C.KickJob(jid), lambda: self.ref.kick_job(cid, jid))

    @rule(cid=CONNS, which=st.sampled_from(["ready", "delayed", "buried"]))
    def peek(self, cid: int, which: str) -> None:
        cmd = {"ready": C.PeekReady(), "delayed": C.PeekDelayed(), "buried": C.PeekBuried()}[which]
        self._cmd(cid, cmd, lambda: getattr(self.ref, f"peek_{which}")(cid))

    @rule(cid=CONNS, tube=TUBES)
    def use(self, cid: int, tube: str) -> None:
        self._cmd(cid, C.Use(tube), lambda: self.ref.use(cid, tube))

    @rule(cid=CONNS, tube=TUBES)
    def watch(self, cid: int, tube: str) -> None:
        self._cmd(cid, C.Watch(tube), lambda: self.ref.watch(cid, tube))

    @rule(cid=CONNS, tube=TUBES)
    def ignore(self, cid: int, tube: str) -> None:
        self._cmd(cid, C.Ignore(tube), lambda: self.ref.ignore(cid, tube))

    @rule(cid=CONNS, tube=TUBES, delay=SECS)
    def pause(self, cid: int, tube: str, delay: int) -> None:
        self._cmd(cid, C.PauseTube(tube, delay), lambda: self.ref.pause_tube(cid, tube, delay))

    @precondition(lambda self: bool(self.e.conns))
    @rule(cid=CONNS)
    def disconnect(self, cid: int) -> None:
        if cid not in self.e.conns:
            return
        self.ref.settle()
        pre = list(self.ref.wakeups)
        self.ref.wakeups.clear()
        out = self.e.disconnect(cid, self.now)
        self.ref.disconnect(cid)
        self.ref.wakeups[:0] = pre
        self._check(out, None, None)

    @rule(cid=CONNS)
    def quit(self, cid: int) -> None:
        self._cmd(cid, C.Quit(), lambda: (self.ref.disconnect(cid), ("CLOSE",))[1])

    @rule(cid=CONNS)
    def half_close(self, cid: int) -> None:
        if cid not in self.e.conns or self.ref.conns[cid].half_closed:
            return
        self.ref.settle()
        pre = list(self.ref.wakeups)
        self.ref.wakeups.clear()
        out = self.e.half_close(cid, self.now)
        ref_reply = self.ref.half_close(cid)
        self.ref.wakeups[:0] = pre
        self._check(out, ref_reply, cid)

    @rule(jump=st.sampled_from([1, 100_000, 500_000, 999_999, 1_000_000, 2_000_000, 7_000_000]),
          tick=st.booleans())  # fmt: skip
    def clock(self, jump: int, tick: bool) -> None:
        """Jump the clock; with tick=False the next command must catch up the timers itself."""
        self.t_us += jump
        self.ref.now = self.t_us
        self.stale = True
        if tick:
            self._check(self.e.tick(self.now), None, None)

    @invariant()
    def same_state(self) -> None:
        e, ref = self.e, self.ref
        assert set(e.jobs) == set(ref.jobs)
        for jid, rj in ref.jobs.items():
            j = e.jobs[jid]
            assert (j.state.name.lower(), j.tube.name, j.pri) == (rj.state, rj.tube, rj.pri), jid
            assert (j.reserves, j.timeouts, j.releases, j.buries, j.kicks) == tuple(rj.counts.values())
            if rj.state in ("reserved", "delayed"):
                assert j.deadline_us == rj.deadline
            if rj.state == "reserved":
                assert j.owner is not None and j.owner.id == rj.owner
        assert [t.name for t in e.tube_order] == ref.tubes
        for cid, rc in ref.conns.items():
            c = e.conns[cid]
            assert c.waiting == rc.waiting
            assert [t.name for t in c.watch] == rc.watch and c.use.name == rc.use
        nd = e.next_deadline()
        assert nd is None or round(nd * US) > self.t_us or self.stale


EngineVsRef.TestCase.settings = settings(max_examples=int(os.environ.get("STALKD_ENGINE_EXAMPLES", "150")), stateful_step_count=60, deadline=None)
TestEngineVsRef = EngineVsRef.TestCase
