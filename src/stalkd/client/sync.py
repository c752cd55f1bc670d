"""The blocking client: one socket, one command at a time, every beanstalkd command. The
connection itself (opening, reconnecting, each exchange and its guarantees) is ``_transport``.

Given several addresses (a primary and its standbys), the client connects to the primary and
follows it across a failover: which commands are then resent, and which raise
``errors.OutcomeUnknown``, is the rule in ``_failover``.

Not thread-safe: use one ``Client`` per thread. A second thread (or a signal handler) calling
in while a call waits gets a ``RuntimeError`` rather than someone else's reply.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from stalkd.client import _failover as failover
from stalkd.client import _requests as rq
from stalkd.client._core import Body, Finish, Finished, PutMany, PutSpec
from stalkd.client._transport import BlockingTransport
from stalkd.client._wire import Response
from stalkd.client._yaml import Value
from stalkd.client.errors import ProtocolError
from stalkd.client.job import Job, JobLike

__all__ = ["Client", "Body"]


class Client(BlockingTransport):
    """A synchronous beanstalkd client.

    ``timeout`` bounds connecting, sending, and each wait for reply bytes (``None``: wait
    forever); a ``reserve`` waits for its own timeout on top of it. Fractional reserve
    timeouts and delays are rounded up to whole seconds (the protocol's unit).

    ``address`` may name several servers (``"h1:11300,h2:11300"`` or a list): the client
    connects to the one whose ``stats`` says it is the primary and, after ``NOT_PRIMARY`` or
    a lost connection, looks for the primary again for up to ``failover_timeout`` seconds
    (default 30 with several addresses; with one, 0: no search, as a plain client).

    Example::

        with Client("127.0.0.1:11300") as c:
            c.use("emails")
            jid = c.put(b"hello", priority=10, ttr=60)
            c.watch("emails")
            job = c.reserve(timeout=5)      # errors.TimedOut if none came
            c.delete(job)
    """

    # --- producer commands ----------------------------------------------------------------

    def use(self, tube: str) -> str:
        """Put later jobs into ``tube`` (created on first use). Returns the tube name.

        The tube in use is remembered: using it again sends nothing.
        """
        req = self._session.use_request(tube)
        if req is not None:
            self._session.used(self._call(req))
        return tube

    @property
    def using(self) -> str:
        """The tube ``put`` goes to (as last acknowledged by the server)."""
        return self._session.using

    def put(self, body: Body, *, priority: int = rq.DEFAULT_PRIORITY, delay: float = 0,
            ttr: float = rq.DEFAULT_TTR, tube: str | None = None) -> int:
        """Put a job into ``tube`` (default: the used tube); returns its id. ``str`` bodies are
        sent as UTF-8. A ``tube`` other than the one in use is ``use``d first (and stays in use).

        Raises ``errors.Buried`` (with ``.id``) if the server buried it for lack of memory,
        ``errors.JobTooBig``, ``errors.Draining``.
        """
        if tube is not None:
            self.use(tube)
        return self._call(rq.put(rq.body_bytes(body), priority, delay, ttr))

    def put_many(self, bodies: Iterable[Body | PutSpec], *, priority: int = rq.DEFAULT_PRIORITY,
                 delay: float = 0, ttr: float = rq.DEFAULT_TTR,
                 tube: str | None = None) -> list[int]:
        """Put many jobs with one write per batch (pipelined); returns their ids in order.

        Every body is sent exactly once and every reply is read, so the connection stays
        usable. If any put failed, the first failure is raised after all were sent, with
        ``.batch_index`` (its position) and ``.batch_ids`` (ids, ``None`` where a put failed).
        A :class:`~stalkd.client.PutSpec` item carries its own priority, delay or TTR.
        """
        if tube is not None:
            self.use(tube)
        plan = PutMany(bodies, priority=priority, delay=delay, ttr=ttr,
                       resend_not_primary=self._failover.enabled)
        try:
            return self._drive(failover.put_batches(self._failover, plan, clock=time.monotonic,
                                                    closed_by_user=self._user_closed))
        except ProtocolError:
            self._drop()  # an answer we cannot place: the stream may be out of step
            raise

    # --- worker commands ------------------------------------------------------------------

    def watch(self, tube: str) -> int:
        """Add ``tube`` to the watch list; returns how many tubes are watched."""
        n = self._call(rq.watch(tube))
        self._session.watched(tube)
        return n

    def ignore(self, tube: str) -> int:
        """Remove ``tube`` from the watch list; ``errors.NotIgnored`` if it is the last one."""
        n = self._call(rq.ignore(tube))
        self._session.ignored(tube)
        return n

    @property
    def watching(self) -> tuple[str, ...]:
        """The watch list (as last acknowledged by the server)."""
        return tuple(self._session.watching)

    def reserve(self, timeout: float | None = None) -> Job:
        """Reserve a job from the watched tubes, waiting up to ``timeout`` s (``None``: forever).

        Raises ``errors.TimedOut`` when none came, ``errors.DeadlineSoon`` when a job this
        connection holds is about to reach its TTR.
        """
        # the wire carries whole seconds, rounded up: wait for that long on top of `timeout`
        return self._call(rq.reserve(timeout), None if timeout is None else math.ceil(timeout))

    def reserve_job(self, job: JobLike) -> Job:
        """Reserve a specific job (ready, delayed or buried; any tube)."""
        return self._call(rq.reserve_job(job))

    def delete(self, job: JobLike) -> None:
        """Delete a job (ready, delayed, buried, or reserved by this connection)."""
        self._call(rq.delete(job))

    def release(self, job: JobLike, *, priority: int = rq.DEFAULT_PRIORITY, delay: float = 0) -> None:
        """Give a reserved job back, ready now or after ``delay`` seconds."""
        self._call(rq.release(job, priority, delay))

    def bury(self, job: JobLike, *, priority: int = rq.DEFAULT_PRIORITY) -> None:
        """Bury a job this connection reserved (kept aside until kicked)."""
        self._call(rq.bury(job, priority))

    def touch(self, job: JobLike) -> None:
        """Restart the TTR of a job this connection reserved."""
        self._call(rq.touch(job))

    def finish(self, job: JobLike, how: str = "delete", *, priority: int = rq.DEFAULT_PRIORITY,
               delay: float = 0, result: tuple[JobLike, float, bytes] | None = None,
               reserve: bool = False, timeout: float | None = None,
               on_acked: Callable[[bool], None] | None = None) -> Finished:
        """A worker's last word on a reserved job, in one round trip: ``result`` (job id, ttl,
        body; the id may be another job's, e.g. a chain's first) is kept with ``result-put``
        (stalkd only: beanstalkd gets out of step, so ``ProtocolError`` drops the connection;
        a refusal such as ``NOT_FOUND`` is ``Finished.result_error``), then the job is deleted, released
        or buried (``how``), then, with ``reserve``, the next job is reserved (waiting up to
        ``timeout`` s). All leave in one write; the server answers in order (see
        ``_core.Finish``). ``on_acked(acted_on)`` runs once the acknowledgement's reply is in, before
        the wait for the reserve: it must not call this client (another thread may
        ``abort()`` it, which ends the wait). With several addresses (failover) the commands
        go one by one."""
        plan = Finish(how, job, priority=priority, delay=delay, result=result,
                      reserve=reserve, timeout=timeout)
        # a reserve waits for its timeout on top of the reply timeout (None: unbounded)
        extra = 0 if not reserve else None if timeout is None else math.ceil(timeout)
        if not self._failover.enabled:
            after = None if on_acked is None else (plan.ack_index, lambda r: on_acked(plan.acked(r)))
            replies = self._exchange(plan.requests, self._wait(extra), after)
        else:
            def reply(i: int, resp: Response) -> None:
                if on_acked is not None and i == plan.ack_index:
                    on_acked(plan.acked(resp))

            replies = self._drive(failover.calls(self._failover, plan.requests, extra,
                                                   clock=time.monotonic,
                                                   closed_by_user=self._user_closed,
                                                   on_reply=reply))
        try:
            return plan.take(replies)
        except ProtocolError:
            self._drop()
            raise

    # --- inspection and admin -------------------------------------------------------------

    def peek(self, job: JobLike) -> Job:
        """A job by id, in any state and tube (``errors.NotFound`` if none)."""
        return self._call(rq.peek(job))

    def peek_ready(self) -> Job:
        """The next ready job of the used tube (``errors.NotFound`` if none)."""
        return self._call(rq.peek_ready())

    def peek_delayed(self) -> Job:
        """The delayed job of the used tube that is due first (``errors.NotFound`` if none)."""
        return self._call(rq.peek_delayed())

    def peek_buried(self) -> Job:
        """The oldest buried job of the used tube (``errors.NotFound`` if none)."""
        return self._call(rq.peek_buried())

    def kick(self, bound: int) -> int:
        """Kick up to ``bound`` buried jobs (or, if none, delayed ones) of the used tube."""
        return self._call(rq.kick(bound))

    def kick_job(self, job: JobLike) -> None:
        """Kick one buried or delayed job, in any tube."""
        self._call(rq.kick_job(job))

    def stats_job(self, job: JobLike) -> dict[str, Value]:
        """``stats-job`` as a dict: ``{"id": 3, "tube": "default", "state": "ready", ...}``."""
        return self._call(rq.stats_job(job))

    def stats_tube(self, tube: str) -> dict[str, Value]:
        """``stats-tube`` as a dict (``errors.NotFound`` if the tube does not exist)."""
        return self._call(rq.stats_tube(tube))

    def stats(self) -> dict[str, Value]:
        """Server ``stats`` as a dict with int, float, bool and str values."""
        return self._call(rq.stats())

    def list_tubes(self) -> list[str]:
        """Names of all tubes on the server."""
        return self._call(rq.list_tubes())

    def list_tube_used(self) -> str:
        """The used tube, as the server sees it."""
        return self._call(rq.list_tube_used())

    def list_tubes_watched(self) -> list[str]:
        """The watch list, as the server sees it."""
        return self._call(rq.list_tubes_watched())

    def pause_tube(self, tube: str, delay: float) -> None:
        """Reserve nothing from ``tube`` for ``delay`` seconds (0 un-pauses)."""
        self._call(rq.pause_tube(tube, delay))

    def result_put(self, job: JobLike, ttl: float, body: bytes | str) -> None:
        """stalkd only: keep ``body`` as ``job``'s result for ``ttl`` seconds (0 forgets it);
        ``errors.UnknownCommand`` from beanstalkd."""
        self._call(rq.result_put(job, ttl, rq.body_bytes(body)))

    def result_get(self, job: JobLike) -> bytes:
        """stalkd only: ``job``'s stored result (``errors.NotFound`` if none or expired)."""
        return bytes(self._call(rq.result_get(job)).body)
