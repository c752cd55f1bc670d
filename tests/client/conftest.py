"""Servers and clients the client tests run against.

Every integration test takes ``server`` (a fresh server on an ephemeral 127.0.0.1 port, stopped
by PID) and usually ``client`` (a connected client to it). ``server`` is parametrised over
Debian's beanstalkd and ``stalkd serve``; ``client`` over the blocking ``Client`` and the
``AsyncClient`` driven through a small synchronous facade, so one test body checks both clients
against both servers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stalkd.client import AsyncClient, Client
from support import ServerProcess, free_port, start_beanstalkd, wait_for_port


def start_stalkd(*extra: str, port: int | None = None) -> ServerProcess:
    """``stalkd serve`` in memory on an ephemeral loopback port (skips if not built yet)."""
    if importlib.util.find_spec("stalkd.server.cli") is None:
        pytest.skip("stalkd serve is not built yet (no stalkd.server.cli)")
    port = port or free_port()
    proc = subprocess.Popen([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1",
                             "-p", str(port), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port("127.0.0.1", port, proc=proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return ServerProcess("127.0.0.1", port, proc)


def start_beanstalkd_on(*extra: str, port: int | None = None) -> ServerProcess:
    if port is None:
        return start_beanstalkd(*extra)
    from support import require_binary

    proc = subprocess.Popen([require_binary("beanstalkd"), "-l", "127.0.0.1", "-p", str(port),
                             *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port("127.0.0.1", port, proc=proc)
    return ServerProcess("127.0.0.1", port, proc)


STARTERS: dict[str, Callable[..., ServerProcess]] = {
    "beanstalkd": start_beanstalkd_on,
    "stalkd": start_stalkd,
}


@pytest.fixture(params=[pytest.param("beanstalkd", marks=pytest.mark.beanstalkd), "stalkd"])
def server_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def start_server(server_kind: str) -> Iterator[Callable[..., ServerProcess]]:
    """``start(*flags, port=None)`` for the parametrised kind; every server started is stopped."""
    started: list[ServerProcess] = []

    def start(*flags: str, port: int | None = None) -> ServerProcess:
        s = STARTERS[server_kind](*flags, port=port)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server()


class AsyncFacade:
    """Runs an :class:`AsyncClient` on a private event loop behind the blocking API, so the
    same test body exercises both clients. Only for tests."""

    def __init__(self, address: str, **kw: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = AsyncClient(address, **kw)
        self._loop.run_until_complete(self._client.connect())

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            result = attr(*args, **kw)
            if asyncio.iscoroutine(result):
                return self._loop.run_until_complete(result)
            return result
        return call

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._client.close())
            self._loop.close()

    def __enter__(self) -> AsyncFacade:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(params=["sync", "async"])
def connect(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``connect(server, **kw)`` opens a client of the parametrised kind; all are closed after."""
    opened: list[Any] = []

    def open_client(server: ServerProcess, **kw: Any) -> Any:
        c: Any = (Client(server.address, **kw) if request.param == "sync"
                  else AsyncFacade(server.address, **kw))
        opened.append(c)
        return c

    yield open_client
    for c in opened:
        c.close()


@pytest.fixture
def client(server: ServerProcess, connect: Callable[..., Any]) -> Any:
    return connect(server)
