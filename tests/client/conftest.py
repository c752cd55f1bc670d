"""Servers and clients the client tests run against.

Every integration test takes ``server`` (a fresh server on an ephemeral 127.0.0.1 port, stopped
by PID) and usually ``client`` (a connected client to it). ``server`` is parametrised over
Debian's beanstalkd and ``stalkd serve``; ``client`` over the blocking ``Client`` and the
``AsyncClient`` driven through a small synchronous facade, so one test body checks both clients
against both servers.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stalkd.client import AsyncClient, Client
from support import ServerProcess, require_binary, spawn_serving, wait_serving


def server_command(kind: str, *flags: str) -> list[str]:
    """The command line starting a server of ``kind`` with beanstalkd-style ``flags``."""
    if kind == "beanstalkd":
        return [require_binary("beanstalkd"), *flags]
    return [sys.executable, "-m", "stalkd.cli", "serve", *flags]


def start_tcp(kind: str, *flags: str, port: int = 0) -> ServerProcess:
    """A server of ``kind``, returned once it answers (not merely listens: see wait_serving)."""
    return spawn_serving(server_command(kind, "-l", "127.0.0.1", "-p", str(port), *flags),
                         what=kind, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_unix(kind: str, path: str) -> subprocess.Popen[bytes]:
    """A server of ``kind`` on the UNIX socket ``path``, once it answers; the caller stops it."""
    proc = subprocess.Popen(server_command(kind, "-l", f"unix:{path}"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_serving(f"unix:{path}", proc=proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc




@pytest.fixture(params=[pytest.param("beanstalkd", marks=pytest.mark.beanstalkd), "stalkd"])
def server_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def start_server(server_kind: str) -> Iterator[Callable[..., ServerProcess]]:
    """``start(*flags, port=0)`` for the parametrised kind; every server started is stopped."""
    started: list[ServerProcess] = []

    def start(*flags: str, port: int = 0) -> ServerProcess:
        s = start_tcp(server_kind, *flags, port=port)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def start_unix_server(server_kind: str) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """``start(path)``: a server of the parametrised kind on a UNIX socket, stopped after."""
    started: list[subprocess.Popen[bytes]] = []

    def start(path: str) -> subprocess.Popen[bytes]:
        started.append(start_unix(server_kind, path))
        return started[-1]

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(10)


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
    """``connect(server or address, **kw)`` opens a client of the parametrised kind; all are closed after."""
    opened: list[Any] = []

    def open_client(server: ServerProcess | str, **kw: Any) -> Any:
        address = server if isinstance(server, str) else server.address
        c: Any = (Client(address, **kw) if request.param == "sync"
                  else AsyncFacade(address, **kw))
        opened.append(c)
        return c

    yield open_client
    for c in opened:
        c.close()


@pytest.fixture
def client(server: ServerProcess, connect: Callable[..., Any]) -> Any:
    return connect(server)
