"""Opening the asyncio transport's connection: to one address, or to the primary among
several (all probed with ``stats`` at once, in the rounds ``_failover.find_primary`` decides); the
twin of ``_dial`` for ``AsyncClient``.

Ensures: every connection opened here is either returned or closed.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

from stalkd.client import _failover as failover
from stalkd.client import _requests as rq
from stalkd.client._address import Address
from stalkd.client._aiowire import Wire
from stalkd.client._failover import Failover
from stalkd.client._tls import connection_kwargs, handshake_refused
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
    except ssl.SSLError as e:
        raise ConnectionFailed(handshake_refused(addr, e)) from e
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
    """Carry out ``_failover.find_primary``'s rounds, probing every address of a round at
    once; the open connection to the primary chosen, or ``errors.NoPrimary``."""
    plan = failover.find_primary(fo, clock=time.monotonic)
    opened: dict[Address, Wire] = {}
    try:
        step = next(plan)
        while True:
            for wire in opened.values():  # the last round's, which found no primary
                _close(wire)
            opened = {}
            if step.wait:
                await asyncio.sleep(step.wait)  # the backoff between rounds
            probes = await asyncio.gather(*(probe(a, timeout) for a in step.addresses))
            opened = {a: wire for a, (wire, _) in zip(step.addresses, probes, strict=True)
                      if wire is not None}
            step = plan.send([seen for _, seen in probes])
    except StopIteration as done:
        chosen: Address = done.value
        return opened.pop(chosen), chosen
    except BaseException:
        plan.close()  # (settles a search it started)
        raise
    finally:
        for wire in opened.values():
            _close(wire)


def _close(wire: Wire) -> None:
    if wire.transport is not None:
        wire.transport.close()
