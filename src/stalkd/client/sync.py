"""The blocking client: one socket, one command at a time, every beanstalkd command.

Ensures: the client is always in step with the server. A reply is matched to its command or
the socket is dropped (timeout, broken connection, garbage, or an interrupt mid-reply), so a
late reply can never be taken for the answer to a later command. After a drop, the next call
reconnects (``reconnect=True``) and restores the used tube and the watch list; the command
that was interrupted is never retried, because whether it took effect is unknown.

Given several addresses (a primary and its standbys), the client connects to the primary and
follows it across a failover: which commands are then resent, and which raise
``errors.OutcomeUnknown``, is the rule in ``_failover``.

Not thread-safe: use one ``Client`` per thread. A second thread (or a signal handler) calling
in while a call waits gets a ``RuntimeError`` rather than someone else's reply.
"""

from __future__ import annotations

import contextlib
import math
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from stalkd.client import _failover as failover
from stalkd.client import _requests as rq
from stalkd.client._address import Address, parse_addresses
from stalkd.client._core import Body, Finish, Finished, PutMany, PutSpec, Session
from stalkd.client._dial import find_primary, open_socket, set_wait
from stalkd.client._failover import Failover
from stalkd.client._idle import IdleCheck
from stalkd.client._wire import ReplyReader, Response
from stalkd.client._yaml import Value
from stalkd.client.errors import (
    ClientConnectionError,
    ConnectionClosed,
    ProtocolError,
    ReplyTimeout,
)
from stalkd.client.job import Job, JobLike

__all__ = ["Client", "Body"]

T = TypeVar("T")
WAIT_SLACK = 2.0  # seconds a reply timeout may fire late rather than cost a socket option change


class Client:
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

    def __init__(self, address: str | Address | Sequence[str | Address] | None = None, *,
                 host: str | None = None, port: int | None = None,
                 timeout: float | None = 10.0, reconnect: bool = True, connect: bool = True,
                 failover_timeout: float | None = None) -> None:
        self.addresses = parse_addresses(address, host, port)
        #: the server connected to (or to be tried first)
        self.address: Address = self.addresses[0]
        self.timeout = timeout
        self.reconnect_enabled = reconnect
        self._failover = Failover(self.addresses, failover_timeout=failover_timeout,
                                  reconnect=reconnect)
        self._closed_by_user = False
        self._gone: IdleCheck | None = None  # with failover: is the idle connection dead?
        self._sock: socket.socket | None = None
        self._sock_timeout: float | None = None
        self._busy = False
        self._reader = ReplyReader()
        self._session = Session()
        self._ever_connected = False
        if connect:
            self.connect()

    # --- connection ---------------------------------------------------------------------

    def connect(self) -> None:
        """Open the connection (if not open) and restore the used tube and watch list."""
        if self._sock is not None:
            return
        if self._failover.probing:
            sock, self.address = find_primary(self._failover, self.timeout)
        else:
            sock = open_socket(self.address, self.timeout)
        set_wait(sock, self.timeout)
        self._sock = sock
        self._sock_timeout = self.timeout
        self._reader = ReplyReader()
        self._ever_connected = True
        self._closed_by_user = False
        self._gone = (IdleCheck(sock.fileno()) if self._failover.enabled and self.address.tls is None
                      else None)
        self._restore()

    def _restore(self) -> None:
        requests = self._session.restore()
        if requests:
            for req, resp in zip(requests, self._exchange(requests, self._wait(0)), strict=True):
                rq.interpret(req, resp)

    def reconnect(self) -> None:
        """Drop the connection (if any) and open a new one with the same tubes."""
        self._drop()
        self.connect()

    def close(self) -> None:
        """Close the connection. The server releases jobs this connection had reserved."""
        self._closed_by_user = True
        self._drop()

    def abort(self) -> None:
        """Close from another thread: shut the socket down first, so a call blocked in the owning
        thread (e.g. ``reserve()``) returns with a connection error at once, and the server sees
        the disconnect now (and releases this connection's reserved jobs)."""
        self._closed_by_user = True
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._drop()

    def quit(self) -> None:
        """Send ``quit`` and close (the server releases this connection's reserved jobs)."""
        self._closed_by_user = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.sendall(rq.QUIT)
        self._drop()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "connected" if self._sock is not None else "closed"
        return f"<Client {self.address} {state} using={self._session.using!r}>"

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _ensure(self) -> socket.socket:
        if self._sock is None:
            if self._ever_connected and not self.reconnect_enabled:
                raise ConnectionClosed(f"connection to {self.address} was closed (reconnect=False)")
            self.connect()
        assert self._sock is not None
        return self._sock

    def _wait(self, extra: float | None) -> float | None:
        """How long one wait for the server may last: ``timeout``, plus ``extra`` for a reserve
        (``None`` when either is unbounded)."""
        if self.timeout is None or extra is None:
            return None
        return self.timeout + extra

    def _exchange(self, requests: Sequence[rq.Request[Any]], wait: float | None,
                  after: tuple[int, Callable[[Response], None]] | None = None) -> list[Response]:
        """Send all requests in one write and read exactly one reply per request; ``after``
        (index, callback) is called once the reply of ``requests[index]`` is in."""
        sock = self._ensure()
        if self._busy:  # a diagnostic, not a lock: interleaved replies would be mismatched
            raise RuntimeError(f"{self!r} is already waiting for a reply: a Client serves one "
                               f"thread at a time (use one per thread, or AsyncClient)")
        self._busy = True
        ok = False
        try:
            data = requests[0].data if len(requests) == 1 else b"".join(r.data for r in requests)
            have = self._sock_timeout
            # Three syscalls, so only when the wait changes by more than WAIT_SLACK: a worker
            # alternating reserve (timeout + 1 s) and delete keeps the longer one.
            if wait != have and not (wait is not None and have is not None
                                     and wait <= have <= wait + WAIT_SLACK):
                set_wait(sock, wait)
                self._sock_timeout = wait
            sock.sendall(data)
            reader = self._reader
            out = []
            for _ in requests:
                while (resp := reader.next()) is None:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionClosed(f"server at {self.address} closed the connection")
                    reader.feed(chunk)
                out.append(resp)
                if after is not None and len(out) == after[0] + 1:
                    after[1](out[-1])
            ok = True
            return out
        except (TimeoutError, BlockingIOError):  # SO_RCVTIMEO/SO_SNDTIMEO ran out
            raise ReplyTimeout(f"no reply from {self.address} within {self._sock_timeout}s "
                               f"to {requests[0].context!r}; connection dropped") from None
        except ClientConnectionError:
            raise
        except OSError as e:
            raise ConnectionClosed(f"connection to {self.address} broke during "
                                   f"{requests[0].context!r}: {e}") from e
        finally:
            self._busy = False
            if not ok:  # out of step with the server (or interrupted): never reuse the socket
                self._drop()

    def _call(self, request: rq.Request[T], extra: float | None = 0) -> T:
        fo = self._failover
        if not fo.enabled:
            (resp,) = self._exchange((request,), self._wait(extra))
        else:
            resp = self._drive(failover.call(fo, request, extra, clock=time.monotonic,
                                             closed_by_user=self._user_closed))
        try:
            return rq.interpret(request, resp)
        except ProtocolError:
            self._drop()  # an answer we cannot place: the stream may be out of step
            raise

    def _user_closed(self) -> bool:
        return self._closed_by_user

    def _drive(self, plan: failover.Plan[T]) -> T:
        """Perform the steps of a failover plan (``_failover``: what is resent, and when)."""
        try:
            step = next(plan)
            while True:
                if step is failover.LEAVE:
                    self._drop()
                    step = plan.send(None)
                    continue
                assert isinstance(step, failover.Send)
                if self._sock is not None and self._gone is not None and self._gone():
                    self._drop()  # died while idle: reconnect before sending, not after
                self._ensure()
                try:
                    replies = self._exchange(step.requests, self._wait(step.extra))
                except ClientConnectionError as e:
                    step = plan.throw(e)
                    continue
                step = plan.send(replies)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except BaseException:
            plan.close()
            raise

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
