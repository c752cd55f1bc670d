"""The blocking client's transport: one socket, its connection and reconnection, and each
exchange of requests and replies on it, with or without failover. :class:`~stalkd.client.Client`
is this class plus one method per beanstalkd command (``sync``).

Ensures: the client is always in step with the server. A reply is matched to its command or
the socket is dropped (timeout, broken connection, garbage, or an interrupt mid-reply), so a
late reply can never be taken for the answer to a later command. After a drop, the next call
reconnects (``reconnect=True``) and restores the used tube and the watch list; the command
that was interrupted is never retried, because whether it took effect is unknown.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from stalkd.client import _failover as failover
from stalkd.client import _requests as rq
from stalkd.client._address import Address
from stalkd.client._dial import find_primary, open_socket, set_wait
from stalkd.client._endpoint import Endpoint
from stalkd.client._idle import IdleCheck
from stalkd.client._tls import why_refused
from stalkd.client._wire import ReplyReader, Response
from stalkd.client.errors import (
    ClientConnectionError,
    ConnectionClosed,
    ProtocolError,
    ReplyTimeout,
)

__all__ = ["BlockingTransport"]

T = TypeVar("T")
WAIT_SLACK = 2.0  # seconds a reply timeout may fire late rather than cost a socket option change


class BlockingTransport(Endpoint):
    """The connection under a :class:`~stalkd.client.Client` (its docstring: the arguments)."""

    def __init__(self, address: str | Address | Sequence[str | Address] | None = None, *,
                 host: str | None = None, port: int | None = None,
                 timeout: float | None = 10.0, reconnect: bool = True, connect: bool = True,
                 failover_timeout: float | None = None) -> None:
        super().__init__(address, host=host, port=port, timeout=timeout, reconnect=reconnect,
                         failover_timeout=failover_timeout)
        self._gone: IdleCheck | None = None  # with failover: is the idle connection dead?
        self._sock: socket.socket | None = None
        self._sock_timeout: float | None = None
        self._busy = False
        self._reader = ReplyReader()
        self._replied = False
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
        self._replied = False  # nothing read yet: a TLS close now is a refused certificate
        self._opened()
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "connected" if self._sock is not None else "closed"
        return f"<{type(self).__name__} {self.address} {state} using={self._session.using!r}>"

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _ensure(self) -> socket.socket:
        if self._sock is None:
            self._may_connect()
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
            self._replied = True
            return out
        except (TimeoutError, BlockingIOError):  # SO_RCVTIMEO/SO_SNDTIMEO ran out
            raise ReplyTimeout(f"no reply from {self.address} within {self._sock_timeout}s "
                               f"to {requests[0].context!r}; connection dropped") from None
        except ClientConnectionError as e:
            if type(e) is ConnectionClosed and self.address.tls is not None and not self._replied:
                raise ConnectionClosed(f"{e}: {why_refused(self.address)}") from None
            raise
        except OSError as e:
            if self.address.tls is not None and not self._replied:
                raise ConnectionClosed(f"TLS connection to {self.address} refused: "
                                       f"{why_refused(self.address, e)} ({e})") from e
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
