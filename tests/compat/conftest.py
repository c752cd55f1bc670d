"""Registry of servers the transcripts run against.

Each entry starts a fresh server on 127.0.0.1 port 0 with extra beanstalkd-style flags (e.g.
``-z 10``) and returns a ``ServerProcess`` (with the port the kernel gave it) the test stops by
PID. To run the transcripts against another server, register a factory here, e.g.::

    def _start_stalkd(*flags: str) -> ServerProcess:
        return spawn_server([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1",
                             "-p", "0", *flags], stdout=subprocess.DEVNULL)

    register("stalkd", "1.13", _start_stalkd)  # its stderr is the test's: pytest shows it

``dialect`` selects which expectations apply where beanstalkd versions differ ("1.12" is
Debian's beanstalkd, "1.13" is stalkd and beanstalkd 1.13).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from support import ServerProcess, start_beanstalkd  # tests/support.py

if TYPE_CHECKING:
    from server.proc import StalkdProcess


@dataclass(frozen=True)
class ServerKind:
    name: str
    dialect: str
    start: Callable[..., ServerProcess]
    marks: tuple[pytest.MarkDecorator, ...] = ()


SERVERS: dict[str, ServerKind] = {}


def register(name: str, dialect: str, start: Callable[..., ServerProcess],
             marks: tuple[pytest.MarkDecorator, ...] = ()) -> None:
    """Add a server the transcripts run against (``start(*flags) -> ServerProcess``)."""
    SERVERS[name] = ServerKind(name, dialect, start, marks)


def _beanstalkd_dialect() -> str:
    """"1.12" or "1.13" from ``beanstalkd -v`` (1.12 when it cannot be asked)."""
    exe = shutil.which("beanstalkd")
    if exe is None:
        return "1.12"
    out = subprocess.run([exe, "-v"], capture_output=True, text=True, timeout=10).stdout
    return "1.12" if "1.12" in out or "1.11" in out else "1.13"


register("beanstalkd", _beanstalkd_dialect(), start_beanstalkd, (pytest.mark.beanstalkd,))


def _serving(server: StalkdProcess) -> StalkdProcess:
    """``start_stalkd`` also returns a server that exited after it listened (tests of start-up
    errors expect that); a transcript needs one that serves. Raised here with the server's
    log, such an exit was a "connection refused" at the transcript's first step."""
    code = server.proc.poll()
    if code is not None:
        raise RuntimeError(f"stalkd exited with {code} before serving:\n{server.log_text()}")
    return server


def _start_stalkd(*flags: str) -> ServerProcess:
    from server.proc import start_stalkd  # tests/server/proc.py (server engineer)

    return _serving(start_stalkd(*flags))


register("stalkd", "1.13", _start_stalkd)


def _start_stalkd_secured(*flags: str) -> ServerProcess:
    """stalkd with a TLS listener, client certificates and an ACL: its plain listener, which
    the transcripts talk to, must behave exactly as without them."""
    from server.proc import start_stalkd
    from server.tlsutil import secured_flags

    return _serving(start_stalkd(*flags, *secured_flags()))


register("stalkd+tls", "1.13", _start_stalkd_secured)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "server_kind" in metafunc.fixturenames:
        metafunc.parametrize(
            "server_kind",
            [pytest.param(k, id=k.name, marks=k.marks) for k in SERVERS.values()],
        )
