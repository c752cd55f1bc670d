"""A deliberately naive reference model of the engine's rules, for the stateful test.

Linear scans over plain dicts instead of heaps and indexes; written from docs/protocol.md and the
engine's documented tie rules (timers fire, then waiters are served in arrival order, then
DEADLINE_SOON / TIMED_OUT), not from the engine's code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

US = 1_000_000
MARGIN = US


@dataclass
class RJob:
    id: int
    tube: str
    pri: int
    delay: int
    ttr: int
    body: bytes
    state: str  # ready / delayed / reserved / buried
    deadline: int = 0
    owner: int | None = None
    bury_order: int = 0
    counts: dict[str, int] = field(
        default_factory=lambda: dict(reserves=0, timeouts=0, releases=0, buries=0, kicks=0)
    )


@dataclass
class RConn:
    use: str = "default"
    watch: list[str] = field(default_factory=lambda: ["default"])
    waiting: bool = False
    arrival: int = 0
    until: int | None = None
    half_closed: bool = False


class Ref:
    def __init__(self) -> None:
        self.jobs: dict[int, RJob] = {}
        self.conns: dict[int, RConn] = {}
        self.tubes: list[str] = ["default"]
        self.pause: dict[str, int] = {}  # tube -> pause end (absent = not paused)
        self.next_id = 1
        self.arrivals = 0
        self.bury_serial = 0
        self.now = 0
        self.wakeups: list[tuple[int, Any]] = []

    # --- helpers ---------------------------------------------------------------------------

    def _ensure_tube(self, name: str) -> None:
        if name not in self.tubes:
            self.tubes.append(name)

    def _gc_tubes(self) -> None:
        for name in list(self.tubes):
            if name == "default":
                continue
            used = any(c.use == name or name in c.watch for c in self.conns.values())
            if not used and not any(j.tube == name for j in self.jobs.values()):
                i = self.tubes.index(name)
                last = self.tubes.pop()
                if i < len(self.tubes):
                    self.tubes[i] = last
                self.pause.pop(name, None)

    def _paused(self, tube: str) -> bool:
        return self.pause.get(tube, 0) > self.now

    def _soonest(self, cid: int) -> int | None:
        ds = [j.deadline for j in self.jobs.values() if j.state == "reserved" and j.owner == cid]
        return min(ds) if ds else None

    def _deadline_soon(self, cid: int) -> bool:
        s = self._soonest(cid)
        return s is not None and self.now >= s - MARGIN

    def _give(self, cid: int, j: RJob) -> None:
        j.state, j.owner, j.deadline = "reserved", cid, self.now + j.ttr * US
        j.counts["reserves"] += 1

    def settle(self) -> None:
        now = self.now
        for j in self.jobs.values():
            if j.state == "delayed" and j.deadline <= now:
                j.state, j.deadline = "ready", 0
            elif j.state == "reserved" and j.deadline <= now:
                j.state, j.deadline, j.owner = "ready", 0, None
                j.counts["timeouts"] += 1
        for t in list(self.pause):
            if self.pause[t] <= now:
                del self.pause[t]
        while True:
            cands = [j for j in self.jobs.values() if j.state == "ready" and not self._paused(j.tube)
                     and any(c.waiting and j.tube in c.watch for c in self.conns.values())]  # fmt: skip
            if not cands:
                break
            j = min(cands, key=lambda j: (j.pri, j.id))
            cid = min((cid for cid, c in self.conns.items() if c.waiting and j.tube in c.watch),
                      key=lambda cid: self.conns[cid].arrival)  # fmt: skip
            self.conns[cid].waiting = False
            self._give(cid, j)
            self.wakeups.append((cid, ("RESERVED", j.id, j.body)))
        for cid, c in self.conns.items():
            if not c.waiting:
                continue
            if self._deadline_soon(cid):
                c.waiting = False
                self.wakeups.append((cid, ("DEADLINE_SOON",)))
            elif c.until is not None and c.until <= now:
                c.waiting = False
                self.wakeups.append((cid, ("TIMED_OUT",)))

    # --- commands (each returns a reply tuple, or None while waiting) ------------------------

    def connect(self, cid: int) -> None:
        self.conns[cid] = RConn()

    def disconnect(self, cid: int) -> None:
        for j in self.jobs.values():
            if j.state == "reserved" and j.owner == cid:
                j.state, j.owner, j.deadline = "ready", None, 0
        del self.conns[cid]
        self._gc_tubes()

    def half_close(self, cid: int) -> Any:
        c = self.conns[cid]
        c.half_closed = True
        if c.waiting:
            c.waiting = False
            return ("TIMED_OUT",)
        return None

    def put(self, cid: int, pri: int, delay: int, ttr: int, body: bytes) -> Any:
        jid = self.next_id
        self.next_id += 1
        j = RJob(jid, self.conns[cid].use, pri, delay, max(ttr, 1), body, "ready")
        if delay:
            j.state, j.deadline = "delayed", self.now + delay * US
        self.jobs[jid] = j
        return ("INSERTED", jid)

    def reserve(self, cid: int, timeout: int | None) -> Any:
        c = self.conns[cid]
        has_ready = any(j.state == "ready" and j.tube in c.watch for j in self.jobs.values())
        if self._deadline_soon(cid) and not has_ready:
            return ("DEADLINE_SOON",)
        if c.half_closed:
            timeout = 0  # nobody can read a reply that waits: time out unless a job is there
        self.arrivals += 1
        c.waiting, c.arrival = True, self.arrivals
        c.until = None if timeout is None else self.now + timeout * US
        return None

    def reserve_job(self, cid: int, jid: int) -> Any:
        j = self.jobs.get(jid)
        if j is None or j.state == "reserved":
            return ("NOT_FOUND",)
        self._give(cid, j)
        return ("RESERVED", j.id, j.body)

    def _own(self, cid: int, jid: int) -> RJob | None:
        j = self.jobs.get(jid)
        return j if j is not None and j.state == "reserved" and j.owner == cid else None

    def delete(self, cid: int, jid: int) -> Any:
        j = self.jobs.get(jid)
        if j is None or (j.state == "reserved" and j.owner != cid):
            return ("NOT_FOUND",)
        del self.jobs[jid]
        self._gc_tubes()
        return ("DELETED",)

    def release(self, cid: int, jid: int, pri: int, delay: int) -> Any:
        j = self._own(cid, jid)
        if j is None:
            return ("NOT_FOUND",)
        j.pri, j.delay, j.owner = pri, delay, None
        j.counts["releases"] += 1
        j.state, j.deadline = ("delayed", self.now + delay * US) if delay else ("ready", 0)
        return ("RELEASED",)

    def bury(self, cid: int, jid: int, pri: int) -> Any:
        j = self._own(cid, jid)
        if j is None:
            return ("NOT_FOUND",)
        self.bury_serial += 1
        j.pri, j.owner, j.state, j.deadline, j.bury_order = pri, None, "buried", 0, self.bury_serial
        j.counts["buries"] += 1
        return ("BURIED",)

    def touch(self, cid: int, jid: int) -> Any:
        j = self._own(cid, jid)
        if j is None:
            return ("NOT_FOUND",)
        j.deadline = self.now + j.ttr * US
        return ("TOUCHED",)

    def _kick_job(self, j: RJob) -> None:
        j.state, j.deadline = "ready", 0
        j.counts["kicks"] += 1

    def kick(self, cid: int, bound: int) -> Any:
        t = self.conns[cid].use
        buried = sorted((j for j in self.jobs.values() if j.tube == t and j.state == "buried"),
                        key=lambda j: j.bury_order)  # fmt: skip
        if buried:
            chosen = buried[:bound]
        else:
            delayed = sorted((j for j in self.jobs.values() if j.tube == t and j.state == "delayed"),
                             key=lambda j: (j.deadline, j.id))  # fmt: skip
            chosen = delayed[:bound]
        for j in chosen:
            self._kick_job(j)
        return ("KICKED", len(chosen))

    def kick_job(self, cid: int, jid: int) -> Any:
        j = self.jobs.get(jid)
        if j is None or j.state not in ("buried", "delayed"):
            return ("NOT_FOUND",)
        self._kick_job(j)
        return ("KICKED",)

    def peek_ready(self, cid: int) -> Any:
        t = self.conns[cid].use
        js = [j for j in self.jobs.values() if j.tube == t and j.state == "ready"]
        return ("FOUND", *_idbody(min(js, key=lambda j: (j.pri, j.id)))) if js else ("NOT_FOUND",)

    def peek_delayed(self, cid: int) -> Any:
        t = self.conns[cid].use
        js = [j for j in self.jobs.values() if j.tube == t and j.state == "delayed"]
        return ("FOUND", *_idbody(min(js, key=lambda j: (j.deadline, j.id)))) if js else ("NOT_FOUND",)

    def peek_buried(self, cid: int) -> Any:
        t = self.conns[cid].use
        js = [j for j in self.jobs.values() if j.tube == t and j.state == "buried"]
        return ("FOUND", *_idbody(min(js, key=lambda j: j.bury_order))) if js else ("NOT_FOUND",)

    def use(self, cid: int, tube: str) -> Any:
        self._ensure_tube(tube)
        self.conns[cid].use = tube
        self._gc_tubes()
        return ("USING", tube)

    def watch(self, cid: int, tube: str) -> Any:
        self._ensure_tube(tube)
        w = self.conns[cid].watch
        if tube not in w:
            w.append(tube)
        return ("WATCHING", len(w))

    def ignore(self, cid: int, tube: str) -> Any:
        w = self.conns[cid].watch
        if tube in w:
            if len(w) == 1:
                return ("NOT_IGNORED",)
            i = w.index(tube)
            last = w.pop()
            if i < len(w):
                w[i] = last
            self._gc_tubes()
        return ("WATCHING", len(w))

    def pause_tube(self, cid: int, tube: str, delay: int) -> Any:
        if tube not in self.tubes:
            return ("NOT_FOUND",)
        if delay:
            self.pause[tube] = self.now + delay * US
        else:
            self.pause.pop(tube, None)
        return ("PAUSED",)


def _idbody(j: RJob) -> tuple[int, bytes]:
    return (j.id, j.body)
