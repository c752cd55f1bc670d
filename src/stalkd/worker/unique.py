"""Unique job keys and dependencies (yoltq's ``:id`` and ``:depends-on``), built on the plain
beanstalkd protocol so they work on stalkd and on beanstalkd alike.

Design
------
A unique key ``K`` is held by a *marker job* in the tube ``stalkd.key.<sha1(K)>``. Nobody watches
those tubes, so markers stay ready; they are records, not work.

* Claim (``put(..., key=K)``): put a marker (priority 0, body = key and claim time), then
  ``peek-ready`` that tube. The ready heap is ordered by (priority, id), so every claimant sees
  the *oldest* marker; the claimant whose own marker is the oldest wins and puts the real job
  (whose envelope names the marker id); every other claimant deletes its marker and its put is a
  no-op (returns None). Two racing producers cannot both win, because ids are unique and
  increasing and a marker is deleted only by its loser or by the job's completion.
* Duplicates: the winner also puts a *pointer* into the key tube, a job delayed for decades
  (so never ready: it does not count as a held key) whose body names the marker and the real
  job. A losing ``put`` reads the marker (``peek-ready``) and the pointer (``peek-delayed``) and,
  when the pointer names that marker, returns a handle to the existing job (:func:`holder`);
  else (the winner has not put it yet, or died first) None. Whoever frees the key deletes the
  pointers of that marker and older ones (:func:`wake_steps`).
* Release: when the job completes, the worker deletes the marker (after storing the job's
  result, if kept, and before deleting the job: a crash in between runs the job again rather
  than holding ``K`` for ever), so ``K`` can be used again. A dead-lettered job keeps its key until it is retried and succeeds or
  deleted by hand (then delete the marker too: ``stalkd.key.*`` tube, ``peek-ready``).
* Dependencies (``depends_on=[K1, ...]``): before running a job, the worker checks each key's
  tube with ``stats-tube``; NOT_FOUND or no ready marker means that job has completed. While one
  is pending, the job is re-put delayed and the delivered copy is deleted (re-put, not release,
  so waiting uses up no attempts; the copy has a new job id, which is why dependencies name keys
  and not ids).
* Wake-up: the copy is registered against the pending key ``K``, before the delivered job is
  deleted: a *waiter* job in the tube ``stalkd.wait.<sha1(K)>`` whose body is the copy's id
  (:func:`wait_steps`). Whoever frees ``K`` (the worker completing its job, or a cancel) then
  kicks every registered copy (delayed to ready) and deletes its waiter (:func:`wake_steps`).
  Because the waiter registers *before* looking at ``K`` once more, and the marker is deleted
  *before* the wait tube is read, either the finisher sees the waiter or the waiter sees ``K``
  free and kicks its copy itself (both may kick: a second ``kick-job`` is a NOT_FOUND). Cleanup:
  a waiter is deleted by whoever kicked its copy. A worker frees ``K`` and wakes its waiters
  *before* deleting its job, so one that dies in between has its job run again, and that run
  wakes them. Only a ``stalkd cancel`` that dies between freeing ``K`` and waking loses a
  wake-up: the copies then wake at the end of their delay (``depends_poll``, the bound on a
  lost wake-up), and the waiters go with the next freeing of the same key (a kick of a gone
  id is a harmless NOT_FOUND). Waiters, like markers, are records in unwatched tubes, all
  durable: a worker restart loses none.

Known limits (what a server extension would fix)
------------------------------------------------
* A producer that dies between its claim and its real put leaves ``K`` held. Markers older than
  ``stale_after`` seconds (``App(unique_ttl=...)``) are treated as abandoned and removed by the
  next claimant. A server-side ``put-unique <key>`` (atomic check-and-insert, key freed on delete)
  would close this window and save two round trips.
* A job waits for as long as its dependency is pending, including while that one sits
  dead-lettered (it has not completed); retrying or deleting the dependency releases it.
* Wake-ups cost a few round trips per wait (a waiter put, a check, a kick and a delete); a
  server-side ``put ... after <key>`` holding the job until the key's job is deleted would do it
  in one.
* The marker tubes show in ``list-tubes`` (``stalkd tubes``, ``top`` and the dashboard hide
  them, as every ``stalkd.`` tube: ``stalkd.tubes``); a generic worker that watches *every* tube would
  reserve markers (stalkd workers watch only their tasks' tubes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Generator
from typing import Any, Protocol

from stalkd.tubes import KEY_TUBE_PREFIX, WAIT_TUBE_PREFIX

__all__ = ["key_tube", "wait_tube", "claim", "pending", "is_pending", "wait_steps", "woken_steps",
           "wake_steps", "point", "holder",
           "drive", "OpCall", "MARKER_PREFIX"]

MARKER_PREFIX = KEY_TUBE_PREFIX


class _Ops(Protocol):
    def put(self, tube: str, body: bytes, *, priority: int, delay: int, ttr: int) -> int: ...
    def peek_ready(self, tube: str) -> tuple[int, bytes] | None: ...
    def peek_delayed(self, tube: str) -> tuple[int, bytes] | None: ...
    def delete(self, job_id: int) -> bool: ...
    def stats_tube(self, tube: str) -> dict[str, object] | None: ...


def key_tube(key: str) -> str:
    """The tube holding ``key``'s marker (a legal beanstalkd tube name for any key).

    >>> key_tube("order-17")
    'stalkd.key.a6ccc1f4cdcfcbb62a2e79dbc38253c2403b584d'
    """
    return MARKER_PREFIX + hashlib.sha1(key.encode()).hexdigest()


def wait_tube(key: str) -> str:
    """The tube holding the waiters registered against ``key`` (see the module docstring).

    >>> wait_tube("order-17")
    'stalkd.wait.a6ccc1f4cdcfcbb62a2e79dbc38253c2403b584d'
    """
    return WAIT_TUBE_PREFIX + hashlib.sha1(key.encode()).hexdigest()


OpCall = tuple[str, tuple[Any, ...]]
"""A server call as a step: a method name of ``ops.ServerOps`` and its arguments."""

WAITER_TTR = 60
POINTER_DELAY = 2**31  # seconds: a pointer is never ready (68 years), so never a held key
_MAX_WAKES = 10_000  # waiters read per freeing: bounds the loop should deletes keep failing


def wait_steps(key: str, job_id: int) -> Generator[OpCall, Any, int | None]:
    """Register the delayed job ``job_id`` to be woken once ``key`` is freed. Returns None, or,
    when ``key`` was freed meanwhile, the waiter's id: the caller then wakes the job itself
    (:func:`woken_steps`), its finisher having perhaps read the wait tube before the waiter
    was in it."""
    waiter: int = yield ("put", (wait_tube(key), str(job_id).encode(), 0, 0, WAITER_TTR))
    if is_pending((yield ("stats_tube", (key_tube(key),)))):
        return None
    return waiter


def woken_steps(job_id: int, waiter: int) -> Generator[OpCall, Any, None]:
    """Wake ``job_id`` and remove its waiter."""
    yield ("kick_job", (job_id,))
    yield ("delete", (waiter,))


def wake_steps(key: str, marker: int | None = None) -> Generator[OpCall, Any, int]:
    """After ``key``'s marker (``marker``) is deleted: delete its pointers (and older ones),
    kick every job registered against the key and delete the registrations; how many jobs
    were woken."""
    if marker is not None:
        for _ in range(_MAX_WAKES):
            got = yield ("peek_delayed", (key_tube(key),))
            if got is None or _pointer(got[1])[0] > marker:
                break  # none left, or a newer holder's: theirs to delete
            yield ("delete", (got[0],))
    tube = wait_tube(key)
    woken = 0
    for _ in range(_MAX_WAKES):
        got = yield ("peek_ready", (tube,))
        if got is None:
            break
        waiter, body = got
        try:
            job_id = int(body)
        except ValueError:
            job_id = None  # not a waiter of ours: removed all the same
        if job_id is not None:
            woken += bool((yield ("kick_job", (job_id,))))
        yield ("delete", (waiter,))
    return woken


def drive(conn: Any, steps: Generator[OpCall, Any, Any]) -> Any:
    """Carry out ``steps`` on a blocking connection (``ops.ServerOps``); what they return."""
    reply: Any = None
    while True:
        try:
            op, args = steps.send(reply)
        except StopIteration as end:
            return end.value
        reply = getattr(conn, op)(*args)


def claim(conn: _Ops, key: str, *, now: float, stale_after: float | None = None) -> int | None:
    """Try to hold ``key``: the marker job id when this caller won, None when already held."""
    tube = key_tube(key)
    body = json.dumps({"key": key, "claimed_at": now}).encode()
    mine = conn.put(tube, body, priority=0, delay=0, ttr=1)
    for _ in range(100):
        first = conn.peek_ready(tube)
        if first is None or first[0] > mine:
            # Our own marker vanished (deleted as "stale" by a claimant with a skewed clock):
            # claim again rather than guess.
            mine = conn.put(tube, body, priority=0, delay=0, ttr=1)
            continue
        holder, holder_body = first
        if holder == mine:
            return mine
        if stale_after is not None and _claimed_at(holder_body) + stale_after < now:
            conn.delete(holder)
            continue
        conn.delete(mine)
        return None
    raise RuntimeError(f"unique key {key!r}: could not settle the claim in tube {tube}")


def point(conn: _Ops, key: str, marker: int, job_id: int) -> None:
    """Record that ``marker`` holds ``key`` for ``job_id`` (see Duplicates in the docstring)."""
    body = json.dumps({"marker": marker, "job": job_id}).encode()
    conn.put(key_tube(key), body, priority=0, delay=POINTER_DELAY, ttr=1)


def holder(conn: _Ops, key: str) -> int | None:
    """The id of the job holding ``key`` now, when its pointer is in; else None."""
    tube = key_tube(key)
    head, ptr = conn.peek_ready(tube), conn.peek_delayed(tube)
    if head is None or ptr is None:
        return None
    marker, job = _pointer(ptr[1])
    return job if marker == head[0] else None


def _pointer(body: bytes) -> tuple[int, int | None]:
    """(marker, job) of a pointer; (0, None) for a body that is not one (deleted as old)."""
    try:
        d = json.loads(body)
        return int(d["marker"]), int(d["job"])
    except (ValueError, KeyError, TypeError):
        return 0, None


def pending(conn: _Ops, key: str) -> bool:
    """Whether a job holding ``key`` has not completed yet."""
    return is_pending(conn.stats_tube(key_tube(key)))


def is_pending(key_tube_stats: dict[str, object] | None) -> bool:
    """Whether a key tube's ``stats-tube`` answer (None: NOT_FOUND) shows a held key.

    >>> is_pending(None), is_pending({"current-jobs-ready": 0}), is_pending({"current-jobs-ready": 1})
    (False, False, True)
    """
    return key_tube_stats is not None and int(str(key_tube_stats.get("current-jobs-ready", 0))) > 0


def _claimed_at(body: bytes) -> float:
    try:
        return float(json.loads(body)["claimed_at"])
    except (ValueError, KeyError, TypeError):
        return 0.0  # an unreadable marker is treated as very old
