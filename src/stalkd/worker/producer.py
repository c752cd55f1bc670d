"""``Task.put`` against a real server: one connection per producing thread.

Ensures: with a unique key, the real job is put only after this producer won the key's claim,
and its envelope names the marker, so the worker frees the key when the job completes.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from stalkd.worker import unique
from stalkd.worker.serializer import Header, encode_envelope

if TYPE_CHECKING:
    from stalkd.worker.app import App, Task
    from stalkd.worker.conn import Conn

__all__ = ["ServerProducer"]


class ServerProducer:
    """Puts jobs through ``stalkd.client`` (reconnecting once on a broken connection)."""

    def __init__(self, app: App, *, unique_ttl: float | None = None) -> None:
        self.app = app
        self.unique_ttl = unique_ttl
        self._local = threading.local()

    def _conn(self) -> Conn:
        conn: Conn | None = getattr(self._local, "conn", None)
        if conn is None:
            from stalkd.worker.conn import Conn

            conn = Conn(self.app.address, timeout=self.app.client_timeout)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def put_job(self, task: Task, payload: Any, *, delay: int, priority: int, ttr: int,
                key: str | None, deps: tuple[str, ...]) -> int | None:
        data = task.check(payload)  # reject before any marker is claimed
        conn = self._conn()
        marker = None
        if key is not None:
            marker = unique.claim(conn, key, now=time.time(), stale_after=self.unique_ttl)
            if marker is None:
                return None
        header = Header(task=task.name, key=key, marker=marker, deps=deps,
                        ttr=None if ttr == task.ttr else ttr)
        body = encode_envelope(header, data)
        return conn.put(task.tube, body, priority=priority, delay=delay, ttr=ttr)
