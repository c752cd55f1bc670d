"""``Task.put`` against a server: one connection per producing thread.

Ensures: with a unique key, the real job is put only after this producer won the key's claim,
and its envelope names the marker, so the worker frees the key when the job completes. The
connection remembers its tube in use, so a run of puts to one task's tube is one round trip each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from stalkd.worker import unique
from stalkd.worker.serializer import Header, encode_envelope
from stalkd.worker.task import Task

__all__ = ["ServerProducer"]


class ServerProducer:
    """Puts jobs through ``connect()`` (a ``ServerOps``, or the in-memory server in tests)."""

    def __init__(self, connect: Callable[[], Any], *, unique_ttl: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.connect = connect
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
                key: str | None, deps: tuple[str, ...]) -> int | None:
        data = task.check(payload)  # reject before any marker is claimed
        conn = self._conn()
        marker = None
        if key is not None:
            marker = unique.claim(conn, key, now=self.clock(), stale_after=self.unique_ttl)
            if marker is None:
                return None
        header = Header(task=task.name, key=key, marker=marker, deps=deps,
                        ttr=None if ttr == task.ttr else ttr)
        body = encode_envelope(header, data)
        job_id: int = conn.put(task.tube, body, priority, delay, ttr)
        return job_id

    def put_jobs(self, task: Task[Any], payloads: Iterable[Any], *, delay: int, priority: int,
                 ttr: int) -> list[int]:
        bodies = [task.encode(p, ttr=ttr) for p in payloads]  # all validated before any is sent
        if not bodies:
            return []
        ids: list[int] = self._conn().put_many(task.tube, bodies, priority, delay, ttr)
        return ids
