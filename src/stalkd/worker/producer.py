"""``Task.put`` against a server: one connection per producing thread.

Ensures: with a unique key, the real job is put only after this producer won the key's claim,
and its envelope names the marker, so the worker frees the key when the job completes. The
connection remembers its tube in use, so a run of puts to one task's tube is one round trip each.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from stalkd.worker import unique
from stalkd.worker.serializer import Header, decode_envelope, encode_envelope
from stalkd.worker.task import Task

__all__ = ["ServerProducer"]


class ServerProducer:
    """Puts jobs through ``connect()`` (a ``ServerOps``, or the in-memory server in tests)."""

    def __init__(self, connect: Callable[[], Any], *, unique_ttl: float | None = None,
                 clock: Callable[[], float] = time.time,
                 aconnect: Callable[[], Any] | None = None) -> None:
        self.connect = connect
        self.aconnect = aconnect
        # one async connection per event loop (a connection is bound to the loop it was made on)
        self._aconns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary())
        self.unique_ttl = unique_ttl
        self.clock = clock
        self._local = threading.local()

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def put_job(self, task: Task[Any], payload: Any, *, delay: int, priority: int, ttr: int,
                key: str | None, deps: tuple[str, ...], inputs: tuple[int, ...] = (),
                gather: bool = False, result_ttl: float | None = None) -> int | None:
        data = task.check(payload)  # reject before any marker is claimed
        conn = self._conn()
        marker = None
        if key is not None:
            marker = unique.claim(conn, key, now=self.clock(), stale_after=self.unique_ttl)
            if marker is None:
                return None
        header = Header(task=task.name, key=key, marker=marker, deps=deps,
                        ttr=None if ttr == task.ttr else ttr, inputs=inputs, gather=gather,
                        result_ttl=result_ttl)
        body = encode_envelope(header, data)
        job_id: int = conn.put(task.tube, body, priority, delay, ttr)
        if key is not None and marker is not None:
            unique.point(conn, key, marker, job_id)  # for a later duplicate's handle
        return job_id

    def holder(self, key: str) -> int | None:
        """The id of the pending job holding ``key`` (None when none is known)."""
        return unique.holder(self._conn(), key)

    async def aput_job(self, task: Task[Any], payload: Any, *, delay: int, priority: int,
                       ttr: int, deps: tuple[str, ...]) -> int:
        if self.aconnect is None:  # an in-memory connection: nothing to wait for
            queued = self.put_job(task, payload, delay=delay, priority=priority, ttr=ttr,
                                  key=None, deps=deps)
            assert queued is not None  # no key, so never a duplicate
            return queued
        header = Header(task=task.name, deps=deps, ttr=None if ttr == task.ttr else ttr)
        body = encode_envelope(header, task.check(payload))
        loop = asyncio.get_running_loop()
        conn = self._aconns.get(loop)
        if conn is None:
            conn = self._aconns[loop] = await self.aconnect()
        job_id: int = await conn.put(task.tube, body, priority, delay, ttr)
        return job_id

    def cancel(self, job_id: int) -> bool:
        """Delete a job that is not running (ready, delayed or buried), freeing its unique key;
        False when there is no such job or a worker holds it."""
        conn = self._conn()
        found = conn.peek(job_id)
        if found is None or not conn.delete(job_id):
            return False
        try:
            header, _ = decode_envelope(found[1], job_id=job_id)
        except ValueError:
            return True  # not a stalkd envelope: nothing else to free
        if header is not None and header.marker is not None:
            conn.delete(header.marker)
            if header.key is not None:
                # its pointer goes, its waiting dependents look again
                unique.drive(conn, unique.wake_steps(header.key, header.marker))
        return True

    def job_state(self, job_id: int) -> str | None:
        """The job's ``stats-job`` state, None when it is gone."""
        info = self._conn().stats_job(job_id)
        return None if info is None else str(info["state"])

    def put_jobs(self, task: Task[Any], payloads: Iterable[Any], *, delay: int, priority: int,
                 ttr: int) -> list[int]:
        bodies = [task.encode(p, ttr=ttr) for p in payloads]  # all validated before any is sent
        if not bodies:
            return []
        ids: list[int] = self._conn().put_many(task.tube, bodies, priority, delay, ttr)
        return ids
