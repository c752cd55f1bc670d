"""Start stalkd as a real process on 127.0.0.1 port 0 (stopped by PID by the test); the port
the kernel gave it is read from ``/proc`` once it listens.

Its log goes to a temporary file (removed when the test process exits) so a failing test can
show what the server said.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from support import ServerProcess, session_file, spawn_server  # tests/support.py

SERVER_CMD = [sys.executable, "-m", "stalkd.node.cli"]


class StalkdProcess(ServerProcess):
    """A ServerProcess that also knows where its log is."""

    log_path: str = ""

    def log_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def kill9(self) -> None:
        """SIGKILL and reap: the crash the durability tests simulate."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def start_stalkd(*flags: str, port: int = 0, wait: bool = True) -> StalkdProcess:
    """``stalkd-server -l 127.0.0.1 -p PORT FLAGS...`` (beanstalkd's flags), returned once it
    serves (or has exited: see _wait_serving); PORT 0 (the default) lets the kernel choose.
    ``wait=False`` returns at once, for a server the test expects to exit (its ``port`` is
    then the one asked for, 0 if none)."""
    fd, log_path = session_file("stalkd-test-", ".log")
    cmd = [*SERVER_CMD, "-l", "127.0.0.1", "-p", str(port), *flags]
    with os.fdopen(fd, "wb") as log:
        if not wait:
            started = ServerProcess("127.0.0.1", port, subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=log))
        else:
            try:
                started = spawn_server(cmd, what="stalkd", stdout=subprocess.DEVNULL, stderr=log)
            except Exception as e:  # (its cause kept: a server that exits right after it listens may
                # exit between two looks for its port, and then "exited with N" is what happened)
                with open(log_path, encoding="utf-8", errors="replace") as f:
                    raise RuntimeError(f"stalkd did not start ({e}):\n{f.read()}") from None
    server = StalkdProcess(started.host, started.port, started.proc)
    server.log_path = log_path
    if wait:
        _wait_serving(server)
    return server


_SERVING = re.compile(r"serving \d+ ms after start")  # serve.py's line once it serves


def _wait_serving(server: StalkdProcess, timeout: float = 120.0) -> None:
    """Until the server says it serves (or exits, which the test may expect). It listens before
    it imports its engine and recovers (node/cli.py): under load its first reply came many
    seconds after the port opened, past the reply timeouts of the tests (the transcripts' 5 s).
    The log, not a probe connection, so the server's connection counts stay the test's own;
    ``timeout`` is only a safety bound."""
    deadline = time.monotonic() + timeout
    while not _SERVING.search(server.log_text()) and server.proc.poll() is None:
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"stalkd listened but did not serve within {timeout}s:\n{server.log_text()}")
        time.sleep(0.01)
