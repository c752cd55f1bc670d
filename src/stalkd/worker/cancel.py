"""Asking a running job to stop: the request, and what its handler sees.

How a request reaches the worker holding the job
------------------------------------------------
beanstalkd does not say which connection holds a reserved job, so the request is addressed by
job id: ``request_stop`` puts a marker job into the tube ``stalkd.cancel.<job id>``. Each worker
process has one extra connection (``middleware.cancellation``) that *watches* the cancel tubes
of the jobs it is running and waits in ``reserve``: a request arrives as soon as it is put
(push, no polling per job). A connection waiting in ``reserve`` cannot change what it watches,
so that thread also watches a tube of its own, ``stalkd.cancel.wake.<token>``, and
``request_stop`` puts a wake-up there for every worker process listening (``list-tubes``, then
``current-watching``): the thread takes it, brings its watch list up to date and waits again,
now for the new job's request too. So a request reaches a job as soon as its handler has
started, at the cost of one put per worker process per request and nothing per job. (Between
reserves the list is also brought up to date every ``wait`` seconds, a second by default.)
A request made while the job is reserved but its handler has not started yet names a job the
thread does not watch yet: it remembers the id, and the job's start puts one more wake-up, so
the request reaches the handler as it starts rather than at that next round.

The marker is durable like any job: a request made while the worker is briefly disconnected is
seen when it reconnects. The worker deletes a marker it acted on, and a wake-up it took; a
marker for a job that had finished meanwhile, and wake-ups nobody took, are deleted by
``request_stop``, which waits (``wait`` seconds) for the job to leave the reserved state and
then cleans up.

What the handler sees
---------------------
A sync handler (threads or processes mode) is never interrupted: it checks ``cancelled()`` (or
calls ``raise_if_cancelled()``) at points where stopping is safe. An ``async def`` handler gets
``asyncio.CancelledError`` at its current ``await``. Either way, a handler that stops by raising
(``JobCancelled`` or the ``CancelledError``) has its job deleted, as a queued job's cancel
does, and its unique key freed; a handler that ignores the request completes as usual.

>>> cancelled()   # outside a handler
False
"""

from __future__ import annotations

import contextvars
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stalkd.tubes import CANCEL_TUBE_PREFIX, WAKE_TUBE_PREFIX
from stalkd.worker.errors import NonRetryable

if TYPE_CHECKING:
    from stalkd.worker.context import JobContext

__all__ = ["JobCancelled", "cancelled", "raise_if_cancelled", "cancel_tube", "request_stop",
           "CANCEL_PREFIX", "WAKE_PREFIX", "WAKE_BODY", "current", "main"]

CANCEL_PREFIX = CANCEL_TUBE_PREFIX
WAKE_PREFIX = WAKE_TUBE_PREFIX  # + a worker process's token: that process's wake-ups
WAKE_BODY = b"wake "  # + the job id; a request's marker body is the bare job id

#: the delivery whose handler runs in this thread or task (set by the pipeline)
current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "stalkd_current_job", default=None)


class JobCancelled(NonRetryable):
    """The job was asked to stop (``App.cancel(job_id)`` while it ran) and its handler did."""


def cancel_tube(job_id: int) -> str:
    """The tube a stop request for ``job_id`` goes to.

    >>> cancel_tube(42)
    'stalkd.cancel.42'
    """
    return f"{CANCEL_PREFIX}{job_id}"


def cancelled() -> bool:
    """Whether the running job was asked to stop (False outside a handler)."""
    ctx = current.get()
    return ctx is not None and ctx.cancel_requested


def raise_if_cancelled() -> None:
    """Raise ``JobCancelled`` when the running job was asked to stop."""
    ctx = current.get()
    if ctx is not None and ctx.cancel_requested:
        raise JobCancelled(f"job {ctx.job_id}: task {ctx.task.name} cancelled on request")


def request_stop(conn: Any, job_id: int, *, wait: float = 5.0,
                 clock: Any = time.monotonic, pause: Any = time.sleep) -> str:
    """Cancel ``job_id``: delete it when it is not running; else ask its worker to stop it.

    Returns ``"deleted"`` (it had not started, or had been released meanwhile),
    ``"stopped"`` (it was running and is gone now), ``"requested"`` (still running after
    ``wait`` seconds: the worker has the request) or ``"not found"``.
    """
    info = conn.stats_job(job_id)
    if info is None:
        return "not found"
    if info.get("state") != "reserved":
        return "deleted" if conn.delete(job_id) else "not found"
    tube = cancel_tube(job_id)
    marker = conn.put(tube, str(job_id).encode(), 0, 0, 60)
    wakes = [conn.put(t, WAKE_BODY + str(job_id).encode(), 0, 0, 60) for t in _listening(conn)]
    try:
        deadline = clock() + wait
        while (info := conn.stats_job(job_id)) is not None and info.get("state") == "reserved":
            if clock() >= deadline:
                return "requested"
            pause(0.05)  # polling the server's state with a deadline
        conn.delete(marker)  # not consumed if the job ended first: leave nothing behind
        if info is not None and conn.delete(job_id):  # released (a retry) before it saw the request
            return "deleted"
        return "stopped"
    finally:
        for w in wakes:  # taken ones are gone already; a worker that died leaves its own
            conn.delete(w)


def _listening(conn: Any) -> list[str]:
    """The wake-up tubes of the worker processes whose cancel thread is connected now."""
    out = []
    for t in conn.list_tubes():
        if t.startswith(WAKE_PREFIX):
            stats = conn.stats_tube(t)
            if stats is not None and int(str(stats.get("current-watching", 0))) > 0:
                out.append(t)
    return out


def main(argv: Sequence[str]) -> int:
    """``stalkd cancel ID...``: delete jobs that have not started, ask running ones to stop."""
    import argparse

    from stalkd.client.options import add_server_options, server_address
    from stalkd.worker.ops import ServerOps
    from stalkd.worker.producer import ServerProducer

    p = argparse.ArgumentParser(
        prog="stalkd cancel",
        description="Cancel jobs: a job that has not started (ready, delayed, buried) is "
        "deleted and its unique key freed; a running one is asked to stop (its handler sees "
        "stalkd.worker.cancelled(), an async one CancelledError; a worker runs the "
        "Cancellation middleware by default).")
    add_server_options(p)
    p.add_argument("ids", nargs="+", type=int, metavar="ID", help="job ids")
    p.add_argument("--wait", type=float, default=5.0, metavar="SECONDS",
                   help="how long to wait for a running job to stop (default 5)")
    args = p.parse_args(list(argv))
    try:
        address = str(server_address(args))
    except ValueError as e:
        p.error(str(e))
    failed = 0
    try:
        conn = ServerOps(address)
        producer = ServerProducer(lambda: conn)
        for job_id in args.ids:
            outcome = "deleted" if producer.cancel(job_id) else request_stop(
                conn, job_id, wait=args.wait)
            print(f"job {job_id}: {outcome}")
            failed += outcome == "not found"
        conn.close()
    except ConnectionError as exc:
        print(f"stalkd cancel: {exc}", file=sys.stderr)
        return 1
    return 1 if failed else 0
