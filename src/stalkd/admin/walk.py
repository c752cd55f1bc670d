"""The jobs of one tube, found with what the beanstalkd protocol offers (no admin API).

The protocol cannot list a tube, and job ids say nothing about tubes: ids go on across
restarts while ``total-jobs`` counts from the last start, so a scan of ids 1..``total-jobs``
misses jobs, and on a long-lived server it reads millions of ids to find a few. Instead the
head of each state is peeked (``peek-ready``/``peek-delayed``/``peek-buried`` of the used tube)
and taken out of the way so the next one shows:

* **changing** a state's jobs (delete, kick, move) takes the head each time: the walk is
  complete, bounded by the state's count when it started (jobs arriving later are left alone);
* **listing** ready jobs borrows them on a connection of its own (``reserve-job``) and closes
  it, which puts them back ready, ids, priorities and ``releases`` (the worker's attempt
  number) unchanged; buried jobs are borrowed and buried again in the same order. Each listed
  job's ``reserves`` counter goes up by one, and a buried one's ``buries`` too (so a dead
  letter listed this way and then retried reports one attempt more; ``--admin`` touches none). Delayed jobs cannot be borrowed without changing
  their delay or their ``releases``, and another connection's reserved jobs cannot be reached:
  for those, only the head (delayed) and the count are shown, and the answer says it is partial.

Ensures: nothing here scans ids; every loop is bounded by a count read from ``stats-tube``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stalkd.client import errors
from stalkd.client.job import Job
from stalkd.client.sync import Client

__all__ = ["STATES", "PEEKABLE", "counts", "job_row", "borrow", "delayed_head", "take_heads"]

STATES = ("ready", "reserved", "delayed", "buried")
PEEKABLE = ("ready", "delayed", "buried")
RACE_SLACK = 64  # extra peeks a walk allows for heads taken by workers between peek and action
_PEEK: dict[str, Callable[[Client], Job]] = {
    "ready": Client.peek_ready, "delayed": Client.peek_delayed, "buried": Client.peek_buried}


def counts(c: Client, tube: str) -> dict[str, int]:
    """Jobs of ``tube`` per state (all 0 for a tube that does not exist)."""
    try:
        st = c.stats_tube(tube)
    except errors.NotFound:
        return dict.fromkeys(STATES, 0)
    return {s: int(str(st.get(f"current-jobs-{s}", 0))) for s in STATES}


def job_row(c: Client, job: Job) -> dict[str, Any] | None:
    """``stats-job`` of ``job`` with ``_`` for ``-``, its size and a 64-character preview of
    its body; None if it is gone."""
    try:
        st = c.stats_job(job.id)
    except errors.NotFound:
        return None
    row: dict[str, Any] = {k.replace("-", "_"): v for k, v in st.items()}
    row["size"] = len(job.body)
    row["body"] = job.body[:64].decode("utf-8", "replace")
    return row


def borrow(open_client: Callable[[], Client], tube: str, state: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` jobs of ``tube`` in ``state`` (ready or buried), in the order the server
    hands them out, each put back as it was (see the module docstring)."""
    rows: list[dict[str, Any]] = []
    held: list[tuple[int, int]] = []  # (id, priority) of what this connection holds
    c = open_client()
    try:
        c.use(tube)
        for _ in range(limit + RACE_SLACK):
            if len(rows) >= limit:
                break
            try:
                head = _PEEK[state](c)
            except errors.NotFound:
                break
            row = job_row(c, head)
            if row is None or row.get("state") != state:
                continue  # changed meanwhile: peek again
            try:
                c.reserve_job(head.id)
            except errors.NotFound:
                continue  # a worker took it between the peek and here
            held.append((head.id, int(row["pri"])))
            rows.append(row)
        if state == "buried":
            for jid, pri in held:
                c.bury(jid, priority=pri)  # back at the FIFO's tail, in the order they were read
    finally:
        c.close()  # ready jobs held go back ready, their release count untouched
    return rows


def delayed_head(c: Client, tube: str) -> list[dict[str, Any]]:
    """The delayed job of ``tube`` due first, as a one-row list (empty if none)."""
    c.use(tube)
    try:
        row = job_row(c, c.peek_delayed())
    except errors.NotFound:
        return []
    return [] if row is None else [row]


def take_heads(c: Client, tube: str, state: str, bound: int,
               one: Callable[[int], str]) -> dict[str, int]:
    """Apply ``one`` to the head of ``tube``'s ``state`` (ready, delayed or buried) until the
    state is empty or ``bound`` jobs were handled; ``one`` must move the head out of the state.
    Returns outcome -> count ("raced" for heads a worker took first)."""
    out: dict[str, int] = {}
    done = 0
    c.use(tube)
    for _ in range(bound + RACE_SLACK):
        if done >= bound:
            break
        try:
            head = _PEEK[state](c)
        except errors.NotFound:
            break
        try:
            outcome = one(head.id)
        except errors.NotFound:
            continue  # reserved by a worker between the peek and the command: not ours to touch
        out[outcome] = out.get(outcome, 0) + 1
        done += 1
    return out
