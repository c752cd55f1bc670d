"""Shared test helpers: ephemeral ports and real peer servers started and stopped by PID.

Import them as `from support import ...` (a unique module name: `from conftest import` would
pick whichever of the several conftest.py modules pytest imported first).

Peer binaries (Debian's beanstalkd, PostgreSQL, Java) are installed by ``scripts/system-deps.sh``
(run by ``make test``). Locally a missing binary skips its tests; under CI (``CI`` set) it fails,
so a broken install step can never pass as green.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass

import pytest


def free_port() -> int:
    """An ephemeral TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_binary(name: str) -> str:
    """Path of ``name``; skip the test when it is missing, unless running under CI."""
    path = shutil.which(name)
    if path is None:
        msg = f"{name} is not installed (scripts/system-deps.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def wait_for_port(host: str, port: int, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts on host:port (polling a connect, not sleeping blindly)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s") from None
            time.sleep(0.01)


@dataclass
class ServerProcess:
    host: str
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_beanstalkd(*extra: str) -> ServerProcess:
    """Start Debian's beanstalkd on an ephemeral loopback port (in memory unless -b is passed)."""
    exe = require_binary("beanstalkd")
    port = free_port()
    proc = subprocess.Popen([exe, "-l", "127.0.0.1", "-p", str(port), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for_port("127.0.0.1", port, proc=proc)
    return ServerProcess("127.0.0.1", port, proc)
