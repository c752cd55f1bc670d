"""Groups and chains: jobs that run in parallel then hand their results to a callback, and jobs
that pass each result to the next. Built on results (``results``) and depends-on (``unique``).

>>> from stalkd.worker.app import App
>>> app = App(middleware=[])
>>> @app.task
... def double(n: int) -> int:
...     return 2 * n
>>> @app.task
... def total(ns: list[int]) -> int:
...     return sum(ns)
>>> with app.testing() as t:
...     h = group(double.s(1), double.s(2), double.s(3)).then(total.s()).put()
...     _ = t.drain()
...     h.result(timeout=0)
12
>>> with app.testing() as t:
...     h = chain(double.s(5), double.s(), double.s()).put()
...     _ = t.drain()
...     h.result(timeout=0)
40

Durability: every job of a group or chain is put by the producer, at ``put()``, before it
returns; nothing is put by a worker. A member or link holds a unique key until it completes;
the callback (or next link) depends on those keys and names its inputs' job ids, so it runs
only once they completed, and then reads their stored results as its payload. A worker that
crashes anywhere only makes a job run again (at-least-once, as for any job); no callback can be
lost, because none is put after the fact. A job waiting for its inputs is re-put before its
delete (as any ``depends_on`` job); should a crash leave two copies, only the one its stored
``waiting`` record names runs, even when two slots hold both at once (``copies``), and a copy
delivered after the job ran finds its outcome and only deletes itself. A member that fails for good keeps its
key (it is buried, not completed), so the callback waits until it is retried and succeeds
(``stalkd retry``) or is deleted by hand, and then fails with ``InputMissing``.

The puts of one ``put()`` are not one transaction: a producer that dies in the middle leaves
the members it put, which run; put the group again (its members then run twice) or use unique
keys of your own in the members' tasks.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from stalkd.worker.results import JobHandle
from stalkd.worker.task import Signature

__all__ = ["Signature", "Group", "Chord", "Chain", "group", "chain", "RESULT_TTL"]

RESULT_TTL = 86400.0
"""Seconds the members' and links' results are kept by default (the callback reads them)."""

def _put(sig: Signature, payload: Any, *, key: str | None = None, deps: tuple[str, ...] = (),
         inputs: tuple[int, ...] = (), gather: bool = False, result_ttl: float) -> JobHandle:
    task = sig.task
    job_id = task.app.producer.put_job(
        task, payload, delay=0, priority=task.priority, ttr=task.ttr, key=key, deps=deps,
        inputs=inputs, gather=gather, result_ttl=result_ttl)
    if job_id is None:  # pragma: no cover - keys are fresh uuids: never held already
        raise RuntimeError(f"key {key!r} is already held")
    return JobHandle(job_id, task.app)


def _keys(n: int) -> list[str]:
    token = uuid.uuid4().hex
    return [f"stalkd.canvas.{token}.{i}" for i in range(n)]


@dataclass(frozen=True)
class Group:
    """Signatures run in parallel (``group(a.s(1), b.s(2))``)."""

    members: tuple[Signature, ...]

    def put(self, *, result_ttl: float = RESULT_TTL) -> list[JobHandle]:
        """Put every member; their handles, in order."""
        return self._put(result_ttl)[0]

    def _put(self, result_ttl: float) -> tuple[list[JobHandle], list[str]]:
        for m in self.members:
            if not m.has_payload:
                raise ValueError(f"group member {m.task.name}: give its payload (task.s(payload))")
        keys = _keys(len(self.members))
        handles = [_put(m, m.payload, key=k, result_ttl=result_ttl) for m, k in zip(self.members, keys, strict=True)]
        return handles, keys

    def then(self, callback: Signature) -> Chord:
        """The callback runs once every member completed, with the list of their results."""
        if callback.has_payload:
            raise ValueError(f"callback {callback.task.name}: its payload is the members' results; "
                             "give it no payload (task.s())")
        return Chord(self, callback)


@dataclass(frozen=True)
class Chord:
    """A group and its callback (``group(...).then(cb.s())``)."""

    group: Group
    callback: Signature

    def put(self, *, result_ttl: float = RESULT_TTL) -> JobHandle:
        """Put the members, then the callback; the callback's handle."""
        members, keys = self.group._put(result_ttl)  # noqa: SLF001 - the same module's
        return _put(self.callback, None, deps=tuple(keys), inputs=tuple(map(int, members)), gather=True,
                    result_ttl=result_ttl)


@dataclass(frozen=True)
class Chain:
    """Signatures run one after the other, each given the previous one's result."""

    links: tuple[Signature, ...]

    def put(self, *, result_ttl: float = RESULT_TTL) -> JobHandle:
        """Put every link (each waits for the one before); the last link's handle."""
        first, *rest = self.links
        if not first.has_payload:
            raise ValueError(f"chain's first link {first.task.name}: give its payload (task.s(payload))")
        for link in rest:
            if link.has_payload:
                raise ValueError(f"chain link {link.task.name}: its payload is the previous result; "
                                 "give it no payload (task.s())")
        keys = _keys(len(self.links))
        h = _put(first, first.payload, key=keys[0], result_ttl=result_ttl)
        for i, link in enumerate(rest, start=1):
            h = _put(link, None, key=keys[i] if i < len(rest) else None, deps=(keys[i - 1],),
                     inputs=(int(h),), result_ttl=result_ttl)
        return h


def group(*members: Signature) -> Group:
    """Members to run in parallel; ``.put()`` them, or ``.then(callback.s()).put()``."""
    if not members:
        raise ValueError("a group needs at least one member")
    return Group(tuple(members))


def chain(*links: Signature) -> Chain:
    """Links to run in order, each given the previous result; ``.put()`` them."""
    if not links:
        raise ValueError("a chain needs at least one link")
    return Chain(tuple(links))
