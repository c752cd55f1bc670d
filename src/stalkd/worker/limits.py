"""Limits shared by every worker of a task or key: "at most 5 at once" and "100 per minute".

>>> from stalkd.worker import App
>>> app = App()
>>> api = Limit(app, "api", concurrency=5)
>>> per_customer = Limit(app, "mail", rate="100/minute")
>>> per_customer.tokens, per_customer.period
(100, 60.0)

In a handler: ``with api.hold(): ...`` or ``with per_customer.hold(key=payload["customer"])``;
in an ``async def`` handler ``async with api.ahold(): ...``.

Where the state lives, and why
------------------------------
In the queue server itself, as *token jobs*: a limit of N is N jobs in the tube
``stalkd.limit.<name>`` (``.<hash of key>`` per key), which nobody but the limiter reserves.

* Concurrency: a holder reserves a token and releases it (no delay) when done. The server hands
  each token to one connection at a time, so at most N hold it, across every process and host.
  A holder that dies drops its connection, and the server puts its token back at once (no
  lease to wait out); a frozen one keeps it, which errs towards fewer, never more.
* Rate: a holder reserves a token and at once releases it with a delay of one period, then
  goes on. A token can be taken once per period, so any period sees at most N starts. The
  release comes before the work, so a holder that dies cannot return a token early.

Tokens are jobs, so they are as durable as the server makes jobs: with a data directory a
restart keeps the limit's state (the tokens in use come back ready, a delayed token keeps its
delay). Nothing to deploy, and it works on beanstalkd too. The cost: one connection per
concurrent holder (pooled), and two round trips per hold.

The tokens are made once per limit, by whoever first claims the tube ``<tube>.init`` (the claim
of ``unique``: the oldest marker wins; the winner's marker stays, recording N). Changing N
later needs the tubes emptied by hand (``stalkd jobs``): a warning says so. A process killed
between winning that claim and putting the tokens (once in the limit's life) leaves fewer.

Waiting for a concurrency token happens inside the handler: it counts towards the job's time
limit, the heartbeat keeps the job meanwhile, and a cancel request ends the wait
(``JobCancelled``). A rate limit's token is not waited for in a job's handler: when none is
ready, ``hold`` raises ``Postpone`` with the seconds until the next one is due, and the worker
puts the job again for then (no attempt used), so its slot serves other jobs meanwhile (as
Dramatiq's rate limiters do). ``hold(wait=True)`` waits instead, as it does outside a handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from stalkd.tubes import LIMIT_TUBE_PREFIX
from stalkd.worker.cancel import current, raise_if_cancelled
from stalkd.worker.errors import Postpone

log = logging.getLogger("stalkd.worker")

__all__ = ["Limit", "LimitTimeout", "parse_rate", "LIMIT_PREFIX"]

LIMIT_PREFIX = LIMIT_TUBE_PREFIX
TOKEN_TTR = 10 * 365 * 86400  # held until released or the holder's connection closes
_UNITS = {"second": 1.0, "s": 1.0, "minute": 60.0, "min": 60.0, "m": 60.0, "hour": 3600.0,
          "h": 3600.0, "day": 86400.0, "d": 86400.0}
F = TypeVar("F", bound=Callable[..., Any])


class LimitTimeout(TimeoutError):
    """No token came within ``hold(timeout=...)``; retryable like any failure."""


def parse_rate(text: str) -> tuple[int, float]:
    """``"100/minute"`` -> (100, 60.0) tokens per period in seconds.

    >>> parse_rate("100/minute"), parse_rate("5/10s"), parse_rate("2 / hour")
    ((100, 60.0), (5, 10.0), (2, 3600.0))
    """
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d*\.?\d*)\s*([a-z]+)\s*", text)
    if not m or m.group(3) not in _UNITS or int(m.group(1)) < 1:
        raise ValueError(f"rate {text!r}: expected N/UNIT such as '100/minute' or '5/10s' "
                         f"(units: {', '.join(sorted(set(_UNITS)))})")
    return int(m.group(1)), float(m.group(2) or 1) * _UNITS[m.group(3)]


class Limit:
    """A limit named ``name``, shared by every process that declares it with the same
    ``concurrency=N`` or ``rate="N/UNIT"`` against the same server."""

    def __init__(self, app: Any, name: str, *, concurrency: int | None = None,
                 rate: str | None = None) -> None:
        if (concurrency is None) == (rate is None):
            raise ValueError(f"limit {name}: give concurrency=N or rate='N/UNIT', one of them")
        if not re.fullmatch(r"[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{0,120}", name):
            raise ValueError(f"limit name {name!r}: use letters, digits and +/;.$_()-")
        self.app = app
        self.name = name
        if concurrency is not None:
            if concurrency < 1:
                raise ValueError(f"limit {name}: concurrency must be >= 1, got {concurrency}")
            self.tokens, self.period = concurrency, 0.0
        else:
            assert rate is not None
            self.tokens, self.period = parse_rate(rate)
        self._pool: list[Any] = []
        self._apools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Any]] = (
            weakref.WeakKeyDictionary())  # asyncio connections are bound to their loop
        self._pool_lock = threading.Lock()
        self._ready: set[str] = set()  # tubes known to hold their tokens

    def tube(self, key: str | None = None) -> str:
        """The token tube for ``key`` (a tube name whatever the key).

        >>> from stalkd.worker import App
        >>> Limit(App(), "api", concurrency=1).tube("customer-7")
        'stalkd.limit.api.f1b900a47ee1967f'
        """
        if key is None:
            return LIMIT_PREFIX + self.name
        return f"{LIMIT_PREFIX}{self.name}.{hashlib.sha1(key.encode()).hexdigest()[:16]}"

    def _conn(self, tube: str) -> Any:
        """An idle connection of this limit's pool, watching only ``tube`` (a pool rather
        than one per thread: handlers with a time limit get a fresh thread per job)."""
        with self._pool_lock:
            conn: Any = self._pool.pop() if self._pool else None
        if conn is None:
            from stalkd.worker.ops import ServerOps

            conn = ServerOps(self.app.address, timeout=self.app.client_timeout)
            conn.watching_tube = None  # an attribute of ours, on our own object
        try:
            if conn.watching_tube != tube:
                conn.watch_only([tube])
                if conn.watching_tube is not None:
                    conn.client.ignore(conn.watching_tube)
                conn.watching_tube = tube
            if tube not in self._ready:
                self._make_tokens(conn, tube)
                self._ready.add(tube)
        except OSError:
            self._drop(conn)
            raise
        return conn

    def _make_tokens(self, conn: Any, tube: str) -> None:
        init = tube + ".init"
        spec = {"limit": self.name, "tokens": self.tokens, "period": self.period}
        top = conn.peek_ready(init)
        if top is None:
            mine = conn.put(init, json.dumps(spec).encode(), 0, 0, TOKEN_TTR)
            top = conn.peek_ready(init)
            if top is not None and top[0] == mine:
                body = json.dumps({"limit": self.name}).encode()
                for _ in range(self.tokens):
                    conn.put(tube, body, 0, 0, TOKEN_TTR)
                return
            conn.delete(mine)
        if top is not None and json.loads(top[1]) != spec:
            log.warning("limit %s: the server holds tokens for %s, this process declares %s; "
                        "to change it, stop the workers and delete the jobs of %s and %s",
                        self.name, top[1].decode(), spec, tube, init)

    @contextlib.contextmanager
    def hold(self, key: str | None = None, *, timeout: float | None = None,
             wait: bool = False) -> Iterator[None]:
        """Take a token (of ``key``'s own limit when given), then run the block. A rate
        limit's token not ready in a job's handler raises ``Postpone`` unless ``wait``."""
        conn = self._conn(self.tube(key))
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            got = None
            postpone = self.period and not wait and current.get() is not None
            if postpone and (got := conn.reserve(timeout=0)) is None:
                due = self._due(conn.client, conn.watching_tube)
                raise Postpone(due, f"limit {self.name}: next token in {due}s")
            while got is None and (got := conn.reserve(timeout=1)) is None:
                raise_if_cancelled()
                if deadline is not None and time.monotonic() >= deadline:
                    raise LimitTimeout(f"limit {self.name}: no token within {timeout}s "
                                       f"(tube {conn.watching_tube})")
            token = got[0]
            if self.period:
                conn.release(token, 0, max(1, math.ceil(self.period)))  # back after a period
        except OSError:
            self._drop(conn)
            raise
        except BaseException:
            self._idle(conn)
            raise
        if self.period:
            self._idle(conn)
            yield
            return
        try:
            yield
        finally:
            try:
                conn.release(token, 0, 0)
                self._idle(conn)
            except OSError:
                self._drop(conn)  # the server released it when the connection went

    def _due(self, client: Any, tube: str) -> int:
        """Whole seconds until ``tube``'s next token is ready (1 if none is delayed: one is
        held for an instant by another process)."""
        from stalkd.client import errors

        client.use(tube)
        try:
            left = int(client.stats_job(client.peek_delayed().id).get("time-left", 0))
        except errors.NotFound:
            return 1
        return max(1, left)

    @contextlib.asynccontextmanager
    async def ahold(self, key: str | None = None, *,
                    timeout: float | None = None, wait: bool = False) -> AsyncIterator[None]:
        """``hold`` for ``async def`` handlers, on an asyncio connection of the running loop
        (a cancelled wait drops its connection, so no token is left reserved)."""
        tube = self.tube(key)
        if tube not in self._ready:
            await asyncio.to_thread(lambda: self._idle(self._conn(tube)))  # makes the tokens
        loop = asyncio.get_running_loop()
        pool = self._apools.setdefault(loop, [])
        conn: Any = pool.pop() if pool else None
        try:
            if conn is None:
                from stalkd.worker.ops import AsyncServerOps

                conn = await AsyncServerOps.open(self.app.address,
                                                 timeout=self.app.client_timeout)
                conn.watching_tube = None  # an attribute of ours, on our own object
            if conn.watching_tube != tube:
                await conn.watch_only([tube])
                if conn.watching_tube is not None:
                    await conn.client.ignore(conn.watching_tube)
                conn.watching_tube = tube
            deadline = None if timeout is None else loop.time() + timeout
            got = None
            postpone = self.period and not wait and current.get() is not None
            if postpone and (got := await conn.reserve(timeout=0)) is None:
                due = await self._adue(conn.client, tube)
                raise Postpone(due, f"limit {self.name}: next token in {due}s")
            while got is None and (got := await conn.reserve(timeout=1)) is None:
                if deadline is not None and loop.time() >= deadline:
                    raise LimitTimeout(f"limit {self.name}: no token within {timeout}s "
                                       f"(tube {tube})")
            token = got[0]
            if self.period:
                await conn.release(token, 0, max(1, math.ceil(self.period)))
        except (LimitTimeout, Postpone):
            pool.append(conn)
            raise
        except BaseException:
            if conn is not None:  # mid-command, or broken: never back in the pool
                with contextlib.suppress(Exception):
                    await conn.close()
            raise
        if self.period:
            pool.append(conn)
            yield
            return
        try:
            yield
        finally:
            try:
                await conn.release(token, 0, 0)
                pool.append(conn)
            except BaseException:
                with contextlib.suppress(Exception):
                    await conn.close()  # the server releases the token with the connection
                raise

    async def _adue(self, client: Any, tube: str) -> int:
        """``_due`` on an asyncio client."""
        from stalkd.client import errors

        await client.use(tube)
        try:
            job = await client.peek_delayed()
            left = int((await client.stats_job(job.id)).get("time-left", 0))
        except errors.NotFound:
            return 1
        return max(1, left)

    def limited(self, fn: F) -> F:
        """Decorate a handler so it runs under ``hold()`` (no key)."""
        import functools

        @functools.wraps(fn)
        def wrapper(*args: Any, **kw: Any) -> Any:
            with self.hold():
                return fn(*args, **kw)

        return wrapper  # type: ignore[return-value]

    def _idle(self, conn: Any) -> None:
        with self._pool_lock:
            self._pool.append(conn)

    def _drop(self, conn: Any) -> None:
        with contextlib.suppress(OSError):
            conn.abort()

    def close(self) -> None:
        """Close the idle connections (held tokens stay with their holders)."""
        with self._pool_lock:
            idle, self._pool = self._pool, []
        for conn in idle:
            with contextlib.suppress(OSError):
                conn.close()
