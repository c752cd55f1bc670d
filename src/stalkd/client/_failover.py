"""Finding the primary among several servers, and what to do with a command after a failover,
without a socket or a clock (both transports feed it replies and the time). The retry loop
itself is here too, as plans (:func:`call`, :func:`put_batches`): generators that yield the
steps (:class:`Send` these requests, :data:`LEAVE` this server) which each transport performs.

A server's ``stats`` says ``role: primary`` or ``role: standby`` and ``epoch: N``; a server
without those lines (beanstalkd, an older stalkd) is a primary of epoch 0. The client probes
every address once per round and connects to the primary with the highest epoch (the earliest
address on a tie), so a former primary that has not yet learnt of its successor loses to it.
A round that finds no primary is followed by another after a backoff that doubles up to
``BACKOFF_CAP``, until ``failover_timeout`` seconds after the failure that started the search.

What is resent on the new primary (the rule, written once here):

* a command answered ``NOT_PRIMARY``: always. The server applied nothing, so resending
  cannot duplicate anything;
* a command whose connection was lost after it was sent and before its reply: only if it is
  ``safe`` (``Request.safe``: it changes no job, or it is a reserve, whose job the server
  releases when the connection drops). A ``put``, ``delete``, ``release``, ``bury``,
  ``touch``, ``kick`` or ``pause-tube`` may or may not have been applied, so it raises
  :class:`~stalkd.client.errors.OutcomeUnknown` instead; the next call reconnects;
* nothing at all after the user closed or aborted the client.

Failover is on when the client has several addresses or ``failover_timeout`` is set above 0;
with one address and no timeout the client behaves as a single-server client always did
(no ``stats`` probe, ``NOT_PRIMARY`` raised as :class:`~stalkd.client.errors.NotPrimary`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from stalkd.client import _requests as rq
from stalkd.client._address import Address
from stalkd.client._core import PutMany
from stalkd.client._wire import Response
from stalkd.client._yaml import Value
from stalkd.client.errors import (
    ClientConnectionError,
    ConnectionClosed,
    NoPrimary,
    NotPrimary,
    OutcomeUnknown,
    ProtocolError,
    ReplyTimeout,
)

__all__ = ["Role", "role_of", "Round", "Search", "Failover", "NOT_PRIMARY",
           "DEFAULT_FAILOVER_TIMEOUT", "BACKOFF_FIRST", "BACKOFF_CAP"]
__all__ += ["Send", "LEAVE", "Plan", "call", "calls", "put_batches"]  # the retry loop both transports drive

T = TypeVar("T")

NOT_PRIMARY = NotPrimary.word
#: how long a client with several addresses keeps looking for a primary after a failure
DEFAULT_FAILOVER_TIMEOUT = 30.0
BACKOFF_FIRST = 0.05
BACKOFF_CAP = 1.0


class Role(NamedTuple):
    """What a server's ``stats`` says it is.

    >>> str(role_of({"role": "standby", "epoch": 3}))
    'standby (epoch 3)'
    """

    primary: bool
    epoch: int

    def __str__(self) -> str:
        return f"{'primary' if self.primary else 'standby'} (epoch {self.epoch})"


def role_of(stats: Mapping[str, Value]) -> Role:
    """The role in a ``stats`` reply; without ``role``/``epoch`` lines, a primary of epoch 0.

    >>> role_of({"version": "1.13"}), role_of({"role": "primary", "epoch": 2})
    (Role(primary=True, epoch=0), Role(primary=True, epoch=2))
    """
    role = stats.get("role", "primary")
    epoch = stats.get("epoch", 0)
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        epoch = 0
    return Role(role == "primary", epoch)


class Round:
    """One pass over the addresses: the transport probes each (in ``addresses`` order, or all
    at once) and reports what it saw; :meth:`choice` is then the primary to use, if any.

    >>> from stalkd.client._address import parse_addresses
    >>> r = Round(parse_addresses("a:1,b:2,c:3"))
    >>> r.failed(r.addresses[0], "connection refused")
    >>> r.answered(r.addresses[1], {"role": "standby", "epoch": 4})
    >>> r.answered(r.addresses[2], {"role": "primary", "epoch": 4})
    >>> str(r.choice())
    'c:3'
    """

    __slots__ = ("addresses", "seen")

    def __init__(self, addresses: Sequence[Address]) -> None:
        self.addresses = tuple(addresses)
        self.seen: dict[Address, Role | str] = {}

    def answered(self, address: Address, stats: Mapping[str, Value]) -> None:
        self.seen[address] = role_of(stats)

    def failed(self, address: Address, why: str) -> None:
        self.seen[address] = why

    def choice(self) -> Address | None:
        """The primary with the highest epoch (the earliest address on a tie), else ``None``."""
        best: tuple[int, Address] | None = None
        for address in self.addresses:
            role = self.seen.get(address)
            if isinstance(role, Role) and role.primary and (best is None or role.epoch > best[0]):
                best = (role.epoch, address)
        return None if best is None else best[1]

    def describe(self) -> str:
        """What each address answered, for an error message."""
        return "; ".join(f"{a}: {self.seen.get(a, 'not tried')}" for a in self.addresses)


class Search:
    """The rounds of one search for a primary, which gives up ``timeout`` seconds after
    ``started`` (times are the caller's monotonic clock).

    >>> from stalkd.client._address import parse_addresses
    >>> s = Search(parse_addresses("a:1,b:2"), timeout=1.0, started=0.0)
    >>> s.next_wait(0.0)            # the first round goes at once
    0.0
    >>> _ = s.round(); s.next_wait(0.0), s.next_wait(0.0)
    (0.05, 0.1)
    >>> s.next_wait(0.875)          # never past the deadline...
    0.125
    >>> s.next_wait(1.0) is None    # ...and nothing after it
    True
    """

    __slots__ = ("addresses", "timeout", "deadline", "rounds", "_backoff", "last")

    def __init__(self, addresses: Sequence[Address], *, timeout: float, started: float) -> None:
        self.addresses = tuple(addresses)
        self.timeout = timeout
        self.deadline = started + timeout
        self.rounds = 0
        self._backoff = BACKOFF_FIRST
        self.last: Round | None = None

    def next_wait(self, now: float) -> float | None:
        """Seconds to wait before the next round, or ``None``: the search is over."""
        if self.rounds == 0:
            return 0.0
        left = self.deadline - now
        if left <= 0:
            return None
        wait = min(self._backoff, left)
        self._backoff = min(self._backoff * 2, BACKOFF_CAP)
        return wait

    def round(self) -> Round:
        self.rounds += 1
        self.last = Round(self.addresses)
        return self.last

    def error(self) -> NoPrimary:
        seen = self.last.describe() if self.last is not None else "no address tried"
        return NoPrimary(f"no primary among {len(self.addresses)} server(s) after "
                         f"{self.rounds} round(s) in {self.timeout:g}s ({seen}); promote a "
                         f"standby (stalkd promote) or start the primary")


class Failover:
    """One client's failover policy: whether to probe for the primary, the search under way
    (one per failure, so resends and reconnects after it share its deadline), and what to do
    with a command after ``NOT_PRIMARY`` or a lost connection.

    >>> from stalkd.client._address import parse_addresses
    >>> f = Failover(parse_addresses("a:1,b:2"), failover_timeout=None, reconnect=True)
    >>> f.enabled, f.timeout
    (True, 30.0)
    >>> f.resend_after_reply(rq.put(b"x", 0, 0, 60), Response("NOT_PRIMARY"), now=0)
    True
    """

    __slots__ = ("addresses", "timeout", "enabled", "search")

    def __init__(self, addresses: Sequence[Address], *, failover_timeout: float | None,
                 reconnect: bool) -> None:
        self.addresses = tuple(addresses)
        several = len(self.addresses) > 1
        if failover_timeout is None:
            failover_timeout = DEFAULT_FAILOVER_TIMEOUT if several else 0.0
        if failover_timeout < 0:
            raise ValueError(f"failover_timeout {failover_timeout} must be >= 0")
        self.timeout = failover_timeout
        self.enabled = reconnect and (several or failover_timeout > 0)
        self.search: Search | None = None

    @property
    def probing(self) -> bool:
        """Whether connecting asks each server's ``stats`` (else: the one address, directly)."""
        return len(self.addresses) > 1 or self.timeout > 0

    def start(self, now: float) -> Search:
        """The search under way, or a new one from ``now``. A transport's connect settles a
        search it started itself once connected; one started by a failed command lasts until
        that command is answered, so its resends share one deadline."""
        if self.search is None:
            self.search = Search(self.addresses, timeout=self.timeout, started=now)
        return self.search

    def settled(self) -> None:
        """A command got its answer from a primary: the next failure starts a new search."""
        self.search = None

    def give_up(self) -> NoPrimary:
        search, self.search = self.search, None
        assert search is not None
        return search.error()

    def resend_after_reply(self, request: rq.Request[Any], response: Response, *,
                           now: float) -> bool:
        """Whether ``response`` asks for ``request`` to go to a new primary (``NOT_PRIMARY``,
        with failover on); otherwise the reply stands (and the search is over)."""
        if response.word == NOT_PRIMARY and self.enabled:
            self.start(now)
            return True
        self.settled()
        return False

    def after_drop(self, request: rq.Request[Any], exc: ClientConnectionError, *,
                   now: float, closed_by_user: bool) -> ClientConnectionError | None:
        """``None`` to resend ``request`` after its connection was lost mid-flight, else the
        error to raise (``exc``, or :class:`OutcomeUnknown` for a command that may have been
        applied).

        >>> from stalkd.client._address import parse_addresses
        >>> f = Failover(parse_addresses("a:1,b:2"), failover_timeout=5, reconnect=True)
        >>> f.after_drop(rq.reserve(None), ConnectionClosed("x"), now=0, closed_by_user=False)
        >>> type(f.after_drop(rq.delete(3), ConnectionClosed("x"), now=0, closed_by_user=False))
        <class 'stalkd.client.errors.OutcomeUnknown'>
        """
        # a reply timeout or a garbled reply is not a failover: resending would meet it again
        if request.safe and self.enabled and not closed_by_user and isinstance(exc, ConnectionClosed) \
                and not isinstance(exc, (ReplyTimeout, ProtocolError, OutcomeUnknown)):
            self.start(now)
            return None
        self.settled()
        if not self.enabled or closed_by_user or not isinstance(exc, ConnectionClosed) \
                or isinstance(exc, (ReplyTimeout, ProtocolError, OutcomeUnknown)):
            return exc
        err = OutcomeUnknown(f"{exc}; {request.context!r} may or may not have been applied, so "
                             f"it was not resent (the next call reconnects to the primary)")
        err.__cause__ = exc
        return err



# --- the retry loop, once for both transports ------------------------------------------------


class Send(NamedTuple):
    """A step of a :func:`call` or :func:`put_batches` plan: write ``requests`` in one go on a
    connection to the primary (opening one if needed) and send back one ``Response`` each, or
    throw the ``ClientConnectionError`` that lost them into the plan. ``extra``: seconds a
    reply may take on top of the client's timeout (``None``: unbounded)."""

    requests: Sequence[rq.Request[Any]]
    extra: float | None


#: A step of a plan: this server is not the primary: leave its connection (no new request goes
#: to it) and send the next step elsewhere.
LEAVE = "leave"

#: What a plan yields: the transport performs each step and sends its result back.
Plan = Generator[Send | str, list[Response] | None, T]


def call(fo: Failover, request: rq.Request[Any], extra: float | None, *,
         clock: Callable[[], float], closed_by_user: Callable[[], bool]) -> Plan[Response]:
    """The steps of one command with failover on: sent until a primary answers, resent after
    ``NOT_PRIMARY`` or a lost connection when the rule above allows; returns the reply.

    >>> from stalkd.client._address import parse_addresses
    >>> fo = Failover(parse_addresses("a:1,b:2"), failover_timeout=5, reconnect=True)
    >>> plan = call(fo, rq.stats(), 0, clock=lambda: 0.0, closed_by_user=lambda: False)
    >>> next(plan).requests[0].data
    b'stats\\r\\n'
    >>> plan.send([Response("NOT_PRIMARY")]), type(plan.send(None)).__name__
    ('leave', 'Send')
    >>> type(plan.throw(ConnectionClosed("gone"))).__name__   # stats is safe: sent again
    'Send'
    >>> try: plan.send([Response("OK", ("3",))])
    ... except StopIteration as done: print(done.value.word, fo.search)
    OK None
    """
    try:
        while True:
            try:
                replies = yield Send((request,), extra)
            except ClientConnectionError as e:
                err = fo.after_drop(request, e, now=clock(), closed_by_user=closed_by_user())
                if err is None:
                    continue
                if err is e:
                    raise
                raise err from e
            assert replies is not None
            (resp,) = replies
            if resp.word != NOT_PRIMARY:  # the common case, without reading the clock
                if fo.search is not None:
                    fo.settled()
                return resp
            if not fo.resend_after_reply(request, resp, now=clock()):
                return resp
            yield LEAVE
    except BaseException:  # the next failure starts a search of its own
        fo.settled()
        raise


def calls(fo: Failover, requests: Sequence[rq.Request[Any]], extra: float | None, *,
          clock: Callable[[], float], closed_by_user: Callable[[], bool],
          on_reply: Callable[[int, Response], None] | None = None) -> Plan[list[Response]]:
    """``call`` for each of ``requests`` in turn, each once the one before it is answered (so
    each goes to whichever server is primary by then); the last waits ``extra`` more.
    ``on_reply(i, reply)`` runs as each reply comes."""
    replies: list[Response] = []
    for i, request in enumerate(requests):
        last = i == len(requests) - 1
        resp = yield from call(fo, request, extra if last else 0, clock=clock,
                               closed_by_user=closed_by_user)
        if on_reply is not None:
            on_reply(i, resp)
        replies.append(resp)
    return replies


def put_batches(fo: Failover, plan: PutMany, *, clock: Callable[[], float],
                closed_by_user: Callable[[], bool]) -> Plan[list[int]]:
    """The steps of a ``put_many``: each batch written in one go; the puts answered
    ``NOT_PRIMARY`` go again to the new primary (never a put lost with its connection);
    returns the ids. ``PutMany.take``'s ``ProtocolError`` leaves the plan: the transport then
    drops the connection."""
    try:
        for batch in plan.batches():
            while batch:
                try:
                    replies = yield Send(batch, 0)
                except ClientConnectionError as e:
                    err = fo.after_drop(batch[0], e, now=clock(), closed_by_user=closed_by_user())
                    if err is None or err is e:  # (a put is never resent after a drop)
                        raise
                    raise err from e
                assert replies is not None
                batch = plan.take(batch, replies)
                if batch:  # NOT_PRIMARY: the new primary gets them
                    fo.start(clock())
                    yield LEAVE
    except BaseException:  # the next failure starts a search of its own
        fo.settled()
        raise
    fo.settled()
    return plan.result()
