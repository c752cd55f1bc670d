"""A campaign's history: every operation's invocation and completion, one JSON object a line.

The Jepsen model: a *process* (one producer, one worker slot, the nemesis) has at most one
operation outstanding; it writes an ``invoke`` event when it sends the operation and an ``ok``,
``fail`` or ``info`` event when it learns the outcome:

- ``ok``: the server acknowledged it (``INSERTED``, ``DELETED``, a job from ``reserve``...);
- ``fail``: the server refused it and nothing changed (``NOT_FOUND``, ``TIMED_OUT``...);
- ``info``: the outcome is unknown (the connection broke or the reply did not come in time): it
  may have taken effect or not, now or later.

Times are ``time.monotonic()`` seconds since the run began, so a history is readable on its own
and no wall-clock jump (one of the faults) can reorder it. A line::

    {"p": "producer-0", "type": "invoke", "f": "put", "t": 1.042, "value": {"body": "p0-17", ...}}

``pair`` turns events into ``Op`` values (invocation and completion together), which is what the
checker reads. Events are written as they happen (flushed a line at a time) so a harness that
dies still leaves the history up to that point.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["Event", "Op", "History", "pair", "read_events", "COMPLETIONS", "WATCH", "is_harness"]

COMPLETIONS = ("ok", "fail", "info")
# The harness's processes besides the nemesis: what it saw the cluster do by itself (a
# promotion under automatic failover) is recorded by a process of its own, since the nemesis may
# have an operation outstanding at that moment; and the final read.
WATCH = "nemesis-watch"


def is_harness(process: str) -> bool:
    """An op of the harness (the nemesis, its watch, the final read), not of a client."""
    return process in ("nemesis", WATCH, "final")


@dataclass(frozen=True)
class Event:
    """One line of a history."""

    process: str
    type: str  # invoke | ok | fail | info
    f: str  # put, reserve, delete, release, bury, final; a nemesis's name for the nemesis
    time: float
    value: dict[str, Any] = field(default_factory=dict)
    node: str = ""  # the server the operation went to ("" when it is not known)

    def to_json(self) -> str:
        d: dict[str, Any] = {"p": self.process, "type": self.type, "f": self.f,
                             "t": round(self.time, 6), "value": self.value}
        if self.node:
            d["node"] = self.node
        return json.dumps(d, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Event:
        d = json.loads(line)
        return cls(d["p"], d["type"], d["f"], float(d["t"]), d.get("value", {}), d.get("node", ""))


@dataclass(frozen=True)
class Op:
    """An invocation with its completion. ``type`` is the completion's (``info`` when none was
    written: the run ended with the operation outstanding). ``value`` merges both events'
    values, the completion's winning."""

    process: str
    f: str
    type: str
    invoke: float
    complete: float | None  # None: no completion was recorded
    value: dict[str, Any]
    node: str = ""

    @property
    def ok(self) -> bool:
        return self.type == "ok"

    @property
    def end(self) -> float:
        """The completion time, or +infinity for an operation that never completed."""
        return float("inf") if self.complete is None else self.complete


def pair(events: Iterable[Event]) -> list[Op]:
    """Operations in invocation order. A completion without an invocation is an error in the
    harness (it says which line); an invocation without a completion is an ``info`` op."""
    open_: dict[str, tuple[int, Event]] = {}
    done: list[tuple[int, Op]] = []
    for i, ev in enumerate(events):
        if ev.type == "invoke":
            if ev.process in open_:
                raise ValueError(f"event {i}: {ev.process} invoked {ev.f} with "
                                 f"{open_[ev.process][1].f} still outstanding")
            open_[ev.process] = (i, ev)
            continue
        if ev.type not in COMPLETIONS:
            raise ValueError(f"event {i}: unknown type {ev.type!r}")
        if ev.process not in open_:
            raise ValueError(f"event {i}: {ev.process} completed {ev.f} it never invoked")
        at, inv = open_.pop(ev.process)
        done.append((at, Op(ev.process, inv.f, ev.type, inv.time, ev.time,
                            {**inv.value, **ev.value}, ev.node or inv.node)))
    for at, inv in open_.values():
        done.append((at, Op(inv.process, inv.f, "info", inv.time, None, dict(inv.value), inv.node)))
    return [op for _, op in sorted(done, key=lambda x: x[0])]


def read_events(path: str | Path) -> list[Event]:
    """A history file's events (a torn last line, from a harness that was killed, is left out)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            out.append(Event.from_json(line))
    return out


class History:
    """The recorder the workload and the nemeses share (thread-safe). With ``path`` every event
    is also appended to that file as it happens; ``events`` keeps them all in memory.

    >>> h = History(clock=iter([0.0, 0.5]).__next__)
    >>> call = h.invoke("producer-0", "put", {"body": "a"})
    >>> h.complete(call, "ok", {"id": 1})
    >>> pair(h.events)[0].value, h.count("put", "ok")
    ({'body': 'a', 'id': 1}, 1)
    """

    def __init__(self, path: str | Path | None = None, *, clock: Any = None) -> None:
        self._t0 = time.monotonic()
        self._clock = clock or (lambda: time.monotonic() - self._t0)
        self._lock = threading.Lock()
        self.events: list[Event] = []
        # (f, type) -> events so far: what a harness polls while the clients run, without
        # pairing a long history (pairing under the lock stalled every client for seconds)
        self.counts: dict[tuple[str, str], int] = {}
        # a new file: events of two runs in one history would read as one impossible run
        self._file: IO[str] | None = open(path, "x", encoding="utf-8") if path else None  # noqa: SIM115

    def now(self) -> float:
        return float(self._clock())

    def _add(self, ev: Event) -> None:
        with self._lock:
            self.events.append(ev)
            self.counts[(ev.f, ev.type)] = self.counts.get((ev.f, ev.type), 0) + 1
            if self._file is not None:
                self._file.write(ev.to_json() + "\n")
                self._file.flush()

    def invoke(self, process: str, f: str, value: dict[str, Any] | None = None,
               node: str = "") -> Event:
        ev = Event(process, "invoke", f, self.now(), dict(value or {}), node)
        self._add(ev)
        return ev

    def complete(self, call: Event, type_: str, value: dict[str, Any] | None = None,
                 node: str = "") -> None:
        if type_ not in COMPLETIONS:
            raise ValueError(f"completion type {type_!r} is not one of {COMPLETIONS}")
        self._add(Event(call.process, type_, call.f, self.now(), dict(value or {}),
                        node or call.node))

    def record(self, process: str, f: str, sent: float, type_: str,
               value: dict[str, Any] | None = None, node: str = "") -> None:
        """An operation whose invocation is known only once it completed (``sent``: the latest
        time it can have been sent, from this history's clock): both events written at once."""
        with self._lock:
            inv = Event(process, "invoke", f, sent, {}, node)
            done = Event(process, type_, f, self.now(), dict(value or {}), node)
            for ev in (inv, done):
                self.events.append(ev)
                self.counts[(ev.f, ev.type)] = self.counts.get((ev.f, ev.type), 0) + 1
                if self._file is not None:
                    self._file.write(ev.to_json() + "\n")
            if self._file is not None:
                self._file.flush()

    def ops(self) -> list[Op]:
        with self._lock:
            events = list(self.events)
        return pair(events)

    def count(self, f: str, type_: str) -> int:
        """How many ``type_`` events of operation ``f`` so far (``count("put", "ok")``: the
        acknowledged puts), at no cost to the clients recording meanwhile."""
        return self.counts.get((f, type_), 0)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __iter__(self) -> Iterator[Event]:
        with self._lock:
            return iter(list(self.events))
