"""The checker: what a history may not contain, one small function per rule.

Pure: it reads ``Op`` values (``history.pair``) and returns ``Anomaly`` values; no socket, file
or clock. What each operation's ``value`` holds (the workload writes it, hand-made histories in
the tests imitate it):

- ``put``: ``body`` (unique in a run), ``tube``, ``pri``, ``delay``, ``ttr``; ``ok`` adds ``id``;
- ``reserve``: ``tube`` (the only tube watched); ``ok`` adds ``id`` and ``body``;
- ``delete``, ``bury``, ``touch``: ``id``; ``release``: ``id``, ``pri``, ``delay``;
- ``final``: the read after the run, its ``ok`` has ``jobs``: ``[{id, body, state, tube, pri}]``;
- the nemesis (process ``nemesis``): ``start`` and ``stop`` ops naming it (``nemesis``), with
  ``breaks`` true when the fault can close connections (a kill, a partition); an op whose value
  has ``old`` and ``new``, the nodes' names, once a standby has been made primary (the
  nemesis's, or under automatic failover one of process ``history.WATCH``, the harness having
  seen a node take over by itself).

The rules, and why each is sound in the face of uncertainty (an ``info`` op may have happened,
at any time after its invocation):

- ``lost``: an acknowledged put whose job is missing from the final read, though no delete of
  it was acknowledged or left unknown;
- ``resurrected``: a job whose delete was acknowledged, delivered by a reserve sent after that,
  or present in the final read;
- ``invented``: a delivered or finally read body that no put carried;
- ``duplicated``: one body under two ids (a put applied twice);
- ``reused-id``: two acknowledged puts given the same id, or an id delivered with a body other
  than the one its put was acknowledged for;
- ``double-hold``: a job reserved by B while A still held it and A's TTR, counted from A's
  reserve being sent, had not run out; A's hold counts as possibly ended once A's process sent
  anything about the job, lost its connection (a ``fail`` or ``info``) or a fault that closes
  connections began;
- ``priority``: a reserve that returned a job while a more urgent one (lower ``pri``) sat ready
  in the same tube: put without delay and acknowledged before the reserve was sent, and neither
  delivered to a reserve sent before this one completed nor deleted. Judged where observable:
  a job's first delivery, with no reserve in the tube left unknown in the ``QUIET`` seconds
  before (one could hold the more urgent job out of sight);
- ``early-delay``: a job delivered before the delay of its put (or of a release) had run,
  counted from that put or release being sent;
- ``fenced-ack``: an operation acknowledged by a node after another node was promoted past it,
  the operation sent after the promotion, its acknowledgement received before the node was
  itself promoted again (a client that fails over may resend an operation to the new primary,
  so the answering node is only known to have answered between invocation and completion).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from campaign.history import WATCH, Op

__all__ = ["Anomaly", "Index", "RULES", "check", "count"]

WRITES = frozenset({"put", "reserve", "delete", "release", "bury", "touch"})
# Seconds without a reserve of unknown outcome in the tube before a reserve judged for priority:
# such a reserve may reach the server late (a partition's retransmits) and hold a job until its
# connection's close arrives; 20 s is several times the workload's TTR, reply timeout and a
# fault's length.
QUIET = 20.0
KINDS = ("lost", "duplicated", "resurrected", "invented", "reused-id", "double-hold", "priority",
         "early-delay", "fenced-ack")


@dataclass(frozen=True)
class Anomaly:
    kind: str
    job: Any  # the job id, or the body when no id applies
    detail: str


@dataclass
class Index:
    """A history's operations grouped the ways the rules read them."""

    ops: list[Op]
    puts: list[Op] = field(default_factory=list)  # every put (any outcome)
    acked: dict[int, list[Op]] = field(default_factory=lambda: defaultdict(list))  # id -> ok puts
    bodies: dict[str, Op] = field(default_factory=dict)  # body -> its put (bodies are unique)
    deliveries: dict[int, list[Op]] = field(default_factory=lambda: defaultdict(list))  # ok reserves
    about: dict[int, list[Op]] = field(default_factory=lambda: defaultdict(list))  # delete/release/...
    by_process: dict[str, list[Op]] = field(default_factory=lambda: defaultdict(list))
    final: dict[int, dict[str, Any]] | None = None  # id -> job, from the final read
    faults: list[Op] = field(default_factory=list)  # nemesis start ops
    promotions: list[Op] = field(default_factory=list)

    @classmethod
    def of(cls, ops: Iterable[Op]) -> Index:
        ix = cls(sorted(ops, key=lambda o: o.invoke))
        for op in ix.ops:
            ix.by_process[op.process].append(op)
            if op.f == "put":
                ix.puts.append(op)
                ix.bodies[op.value["body"]] = op
                if op.ok:
                    ix.acked[op.value["id"]].append(op)
            elif op.f == "reserve" and op.ok:
                ix.deliveries[op.value["id"]].append(op)
            elif op.f in ("delete", "release", "bury", "touch"):
                ix.about[op.value["id"]].append(op)
            elif op.f == "final" and op.ok:
                ix.final = {int(j["id"]): j for j in op.value["jobs"]}
            elif op.process == "nemesis" and op.f == "start":
                ix.faults.append(op)
            if op.process in ("nemesis", WATCH) and op.type != "fail" and "old" in op.value and "new" in op.value:
                ix.promotions.append(op)
        return ix

    def put_of(self, jid: int) -> Op | None:
        """The acknowledged put that created job ``jid`` (the first, if the id was reused)."""
        puts = self.acked.get(jid)
        return puts[0] if puts else None

    def deleted_at(self, jid: int) -> float | None:
        """When the first acknowledged delete of ``jid`` completed."""
        ends = [op.end for op in self.about.get(jid, ()) if op.f == "delete" and op.ok]
        return min(ends, default=None)

    def maybe_deleted(self, jid: int) -> bool:
        return any(op.f == "delete" and op.type in ("ok", "info") for op in self.about.get(jid, ()))


def lost(ix: Index) -> list[Anomaly]:
    if ix.final is None:
        return []
    out = []
    for jid, puts in ix.acked.items():
        if jid not in ix.final and not ix.maybe_deleted(jid):
            out.append(Anomaly("lost", jid, f"put of {puts[0].value['body']!r} acknowledged at "
                                            f"{puts[0].end:.3f}s, not in the final read, never deleted"))
    return out


def resurrected(ix: Index) -> list[Anomaly]:
    out = []
    for jid in ix.about:
        gone = ix.deleted_at(jid)
        if gone is None:
            continue
        again = [r for r in ix.deliveries.get(jid, ()) if r.invoke > gone]
        if again:
            out.append(Anomaly("resurrected", jid, f"deleted at {gone:.3f}s, delivered again to "
                                                   f"{again[0].process} at {again[0].end:.3f}s"))
        elif ix.final is not None and jid in ix.final:
            out.append(Anomaly("resurrected", jid, f"deleted at {gone:.3f}s, in the final read"))
    return out


def _seen(ix: Index) -> Iterable[tuple[int, str, str]]:
    """(id, body, where) for every delivery and every finally read job."""
    for jid, rs in ix.deliveries.items():
        for r in rs:
            yield jid, r.value["body"], f"delivered to {r.process} at {r.end:.3f}s"
    for jid, j in (ix.final or {}).items():
        yield jid, j["body"], "in the final read"


def invented(ix: Index) -> list[Anomaly]:
    out, told = [], set()
    for jid, body, where in _seen(ix):
        if body not in ix.bodies and jid not in told:
            told.add(jid)
            out.append(Anomaly("invented", jid, f"body {body!r} {where}: nobody put it"))
    return out


def duplicated(ix: Index) -> list[Anomaly]:
    ids: dict[str, set[int]] = defaultdict(set)
    for jid, body, _ in _seen(ix):
        ids[body].add(jid)
    for jid, puts in ix.acked.items():
        for p in puts:
            ids[p.value["body"]].add(jid)
    return [Anomaly("duplicated", body, f"one put, jobs {sorted(js)}")
            for body, js in ids.items() if len(js) > 1 and body in ix.bodies]


def reused_ids(ix: Index) -> list[Anomaly]:
    seen: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for jid, body, where in _seen(ix):
        seen[jid].append((body, where))
    out = []
    for jid, puts in ix.acked.items():
        bodies = {p.value["body"] for p in puts}
        if len(bodies) > 1:
            out.append(Anomaly("reused-id", jid, f"acknowledged for {len(bodies)} puts: {sorted(bodies)}"))
            continue
        (body,) = bodies
        other = next(((b, w) for b, w in seen.get(jid, ()) if b != body), None)
        if other is not None:
            out.append(Anomaly("reused-id", jid, f"put as {body!r}, {other[1]} as {other[0]!r}"))
    return out


def _hold_ended_by(ix: Index, a: Op, jid: int, t: float) -> bool:
    """Whether the hold reserve ``a`` began may have ended before time ``t``."""
    for op in ix.by_process[a.process]:
        if a.end < op.invoke < t and (op.value.get("id") == jid or op.type != "ok"):
            return True
    return any(a.invoke <= f.invoke < t and f.value.get("breaks", True) for f in ix.faults)


def double_holds(ix: Index) -> list[Anomaly]:
    out = []
    for jid, rs in ix.deliveries.items():
        put = ix.put_of(jid) or ix.bodies.get(rs[0].value["body"])
        if put is None:
            continue
        ttr = float(put.value.get("ttr", 0))
        rs = sorted(rs, key=lambda r: r.end)
        for a, b in zip(rs, rs[1:], strict=False):
            if b.end < a.invoke + ttr and not _hold_ended_by(ix, a, jid, b.end):
                out.append(Anomaly("double-hold", jid, f"held by {a.process} (reserve sent "
                                   f"{a.invoke:.3f}s, ttr {ttr:g}s) and by {b.process} at {b.end:.3f}s"))
                break
    return out


def priority_order(ix: Index) -> list[Anomaly]:
    """A sweep over each tube's first deliveries in the order they were sent, with the
    acknowledged undelayed puts entering the candidates once acknowledged and leaving once
    anything was sent about them (a delivery, a delete...)."""
    unknown: dict[str, list[float]] = defaultdict(list)  # tube -> reserves of unknown outcome
    for op in ix.ops:
        if op.f == "reserve" and op.type == "info":
            unknown[op.value.get("tube", "")].append(op.invoke)
    ready: dict[str, list[tuple[float, float, Op]]] = defaultdict(list)  # (ready, taken, put)
    for p in ix.puts:
        if p.ok and not p.value.get("delay"):
            qid = p.value["id"]
            taken = min([d.invoke for d in ix.deliveries.get(qid, ())]
                        + [o.invoke for o in ix.about.get(qid, ())], default=float("inf"))
            ready[p.value["tube"]].append((p.end, taken, p))
    firsts: dict[str, list[tuple[Op, Op]]] = defaultdict(list)  # tube -> (first delivery, put)
    for jid, rs in ix.deliveries.items():
        put = ix.put_of(jid)
        if put is not None:  # the first delivery is at its put's priority
            r = min(rs, key=lambda o: o.end)
            firsts[r.value["tube"]].append((r, put))
    out = []
    for tube, deliveries in firsts.items():
        entering = sorted(ready[tube], key=lambda x: x[0])
        active: list[tuple[float, float, Op]] = []
        i = 0
        for r, put in sorted(deliveries, key=lambda x: x[0].invoke):
            while i < len(entering) and entering[i][0] < r.invoke:
                active.append(entering[i])
                i += 1
            active = [a for a in active if a[1] >= r.invoke]  # taken since: never a candidate again
            if any(r.end - QUIET < t < r.end for t in unknown[tube]):
                continue  # a reserve of unknown outcome may hold the other job
            q = next((q for _, taken, q in active if taken >= r.end and q.value["id"] != put.value["id"]
                      and q.value["pri"] < put.value["pri"]), None)
            if q is not None:
                out.append(Anomaly("priority", put.value["id"], f"{r.process} got pri {put.value['pri']} "
                                   f"at {r.end:.3f}s while job {q.value['id']} (pri {q.value['pri']}) was ready"))
    return out


def early_delays(ix: Index) -> list[Anomaly]:
    out = []
    for jid, rs in ix.deliveries.items():
        put = ix.put_of(jid)
        if put is None:
            continue
        for r in rs:
            starts = [(put.invoke, float(put.value.get("delay", 0)), "put")]
            starts += [(o.invoke, float(o.value.get("delay", 0)), "release")
                       for o in ix.about.get(jid, ()) if o.f == "release" and o.ok and o.end < r.invoke]
            sent, delay, what = max(starts)
            if r.end < sent + delay:
                out.append(Anomaly("early-delay", jid, f"{what} with delay {delay:g}s sent at "
                                   f"{sent:.3f}s, delivered at {r.end:.3f}s"))
                break
    return out


def fenced_acks(ix: Index) -> list[Anomaly]:
    out = []
    for p in ix.promotions:
        old, since = p.value["old"], p.end
        # fenced until it is itself promoted again (a later failover back to it)
        until = min((q.invoke for q in ix.promotions if q.value["new"] == old and q.invoke > since),
                    default=float("inf"))
        for op in ix.ops:
            if op.ok and op.f in WRITES and op.node == old and since < op.invoke and op.end < until:
                out.append(Anomaly("fenced-ack", op.value.get("id", op.value.get("body")),
                                   f"{op.f} sent at {op.invoke:.3f}s acknowledged by {old}, "
                                   f"fenced by the promotion of {p.value['new']} at {since:.3f}s"))
    return out


RULES: tuple[Callable[[Index], list[Anomaly]], ...] = (
    lost, duplicated, resurrected, invented, reused_ids, double_holds, priority_order,
    early_delays, fenced_acks)


def check(ops: Iterable[Op]) -> list[Anomaly]:
    """Every anomaly of every rule in a history's operations."""
    ix = Index.of(ops)
    return [a for rule in RULES for a in rule(ix)]


def count(anomalies: Iterable[Anomaly]) -> dict[str, int]:
    """Anomalies per kind (every kind present, zero or not)."""
    out = dict.fromkeys(KINDS, 0)
    for a in anomalies:
        out[a.kind] += 1
    return out
