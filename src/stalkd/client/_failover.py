"""Finding the primary among several servers, and what to do with a command after a failover,
without a socket or a clock (both transports feed it replies and the time). The retry loop
itself is here too, as plans (:func:`call`, :func:`put_batches`): generators that yield the
steps (:class:`Send` these requests, :data:`LEAVE` this server) which each transport performs.

The search for the primary is a plan too (:func:`find_primary`: :class:`Probe` these addresses
after a backoff), over the rounds of ``_primary``; it searches until ``failover_timeout``
seconds after the failure that started it.

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
from stalkd.client._primary import Search
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

__all__ = ["Failover", "NOT_PRIMARY", "DEFAULT_FAILOVER_TIMEOUT"]
# the search and the retry loop both transports drive
__all__ += ["Probe", "Seen", "Searching", "find_primary"]
__all__ += ["Send", "LEAVE", "Plan", "call", "calls", "put_batches"]

T = TypeVar("T")

NOT_PRIMARY = NotPrimary.word
#: how long a client with several addresses keeps looking for a primary after a failure
DEFAULT_FAILOVER_TIMEOUT = 30.0


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



# --- the search for the primary, once for both transports ------------------------------------


class Probe(NamedTuple):
    """The step of a :func:`find_primary` plan: after ``wait`` seconds (the backoff between
    rounds), open a connection to each of ``addresses`` and ask its ``stats`` (one after
    another, or all at once), and send back, in ``addresses`` order, what each answered or
    why it could not (a ``str``). The transport holds the connections it opened: it keeps
    the one to the address the plan returns and closes the others (all of them when the plan
    yields another round or raises)."""

    wait: float
    addresses: tuple[Address, ...]


#: What a probed address said: its ``stats``, or why there are none.
Seen = Mapping[str, Value] | str

#: What a search yields and is sent (see :class:`Probe`); it returns the primary's address.
Searching = Generator[Probe, Sequence[Seen], Address]


def find_primary(fo: Failover, *, clock: Callable[[], float]) -> Searching:
    """The steps of connecting to the primary: rounds of probes until one finds a primary
    (returned), or ``errors.NoPrimary`` when the search under way ends. A search this plan
    started is over once it returns or fails; one started by a failed command goes on until
    that command is answered (``Failover.start``).

    >>> from stalkd.client._address import parse_addresses
    >>> fo = Failover(parse_addresses("a:1,b:2"), failover_timeout=5, reconnect=True)
    >>> plan = find_primary(fo, clock=lambda: 0.0)
    >>> step = next(plan); step.wait, [str(a) for a in step.addresses]
    (0.0, ['a:1', 'b:2'])
    >>> plan.send(["refused", {"role": "standby"}]).wait
    0.05
    >>> try: plan.send([{"role": "standby"}, {"role": "primary", "epoch": 1}])
    ... except StopIteration as done: print(done.value, fo.search)
    b:2 None
    """
    fresh = fo.search is None
    search = fo.start(clock())
    try:
        while True:
            wait = search.next_wait(clock())
            if wait is None:
                raise fo.give_up()
            found = search.round()
            seen = yield Probe(wait, found.addresses)
            for address, said in zip(found.addresses, seen, strict=True):
                if isinstance(said, str):
                    found.failed(address, said)
                else:
                    found.answered(address, said)
            chosen = found.choice()
            if chosen is not None:
                if fresh:
                    fo.settled()
                return chosen
    except BaseException:  # a bad TLS file, an interrupt, a cancel: no search left half done
        if fresh:
            fo.settled()
        raise
