"""Opening the asyncio transport's connection: to one address, or to the primary among
several (all probed with ``stats`` at once, in the rounds ``_failover.Search`` decides); the
twin of ``_dial`` for ``AsyncClient``.

Ensures: every connection opened here is either returned or closed.
"""

from __future__ import annotations

import asyncio
import socket
import time

from stalkd.client import _requests as rq
from stalkd.client._address import Address
from stalkd.client._aiowire import Wire
from stalkd.client._failover import Failover
from stalkd.client._tls import connection_kwargs
from stalkd.client._wire import Response
from stalkd.client._yaml import Value
from stalkd.client.errors import (
    BeanstalkError,
    ClientConnectionError,
    ConnectionClosed,
    ConnectionFailed,
)

__all__ = ["open_wire", "probe", "find_primary"]


async def open_wire(addr: Address, timeout: float | None) -> Wire:
    """The one place the asyncio transport opens a connection (``ConnectionFailed``, naming
    the address, if it cannot)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            if addr.path is not None:
                _, wire = await loop.create_unix_connection(lambda: Wire(addr), addr.path)
            else:
                _, wire = await loop.create_connection(lambda: Wire(addr), addr.host, addr.port,
                                                       **connection_kwargs(addr))
    except (OSError, TimeoutError) as e:
        raise ConnectionFailed(f"cannot connect to beanstalkd server at {addr}: "
                               f"{e or 'timed out'}") from e
    assert wire.transport is not None
    sock = wire.transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return wire


async def probe(address: Address, timeout: float | None) -> tuple[Wire | None, dict[str, Value] | str]:
    """A new connection to ``address`` and its ``stats``, or why there is none."""
    try:
        wire = await open_wire(address, timeout)
    except ClientConnectionError as e:
        return None, str(e.__cause__ or e)
    req = rq.stats()
    fut: asyncio.Future[Response] = wire.loop.create_future()
    wire.expect(fut, timeout, req)
    assert wire.transport is not None
    wire.transport.write(req.data)
    try:
        return wire, rq.interpret(req, await fut)
    except (ClientConnectionError, BeanstalkError) as e:
        wire.fail(ConnectionClosed(f"probe of {address} failed: {e}"))
        return None, str(e)
    except BaseException:
        wire.fail(ConnectionClosed(f"probe of {address} abandoned"))
        raise


async def find_primary(fo: Failover, timeout: float | None) -> tuple[Wire, Address]:
    """Probe every address at once, in rounds, and return the open connection to the primary
    chosen; ``errors.NoPrimary`` when the search ends."""
    fresh = fo.search is None
    search = fo.start(time.monotonic())
    while True:
        wait = search.next_wait(time.monotonic())
        if wait is None:
            raise fo.give_up()
        found = search.round()
        try:
            if wait:
                await asyncio.sleep(wait)  # the backoff between rounds
            probes = await asyncio.gather(*(probe(a, timeout) for a in found.addresses))
        except BaseException:  # a bad TLS file, a cancel: no search left half done
            if fresh:
                fo.settled()
            raise
        opened: dict[Address, Wire] = {}
        for address, (wire, seen) in zip(found.addresses, probes, strict=True):
            if isinstance(seen, str):
                found.failed(address, seen)
            else:
                found.answered(address, seen)
            if wire is not None:
                opened[address] = wire
        chosen = found.choice()
        for address, wire in opened.items():
            if address != chosen and wire.transport is not None:
                wire.transport.close()
        if chosen is not None:
            if fresh:
                fo.settled()
            return opened[chosen], chosen
