"""Start stalkd as a real process on an ephemeral 127.0.0.1 port (stopped by PID by the test).

Its log goes to a temporary file so a failing test can show what the server said.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from support import ServerProcess, free_port, wait_for_port  # tests/support.py

SERVER_CMD = [sys.executable, "-m", "stalkd.server.cli"]


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


def start_stalkd(*flags: str, port: int | None = None, wait: bool = True) -> StalkdProcess:
    """``stalkd-server -l 127.0.0.1 -p PORT FLAGS...`` (beanstalkd's flags)."""
    port = free_port() if port is None else port
    fd, log_path = tempfile.mkstemp(prefix="stalkd-test-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen([*SERVER_CMD, "-l", "127.0.0.1", "-p", str(port), *flags],
                                stdout=subprocess.DEVNULL, stderr=log)
    server = StalkdProcess("127.0.0.1", port, proc)
    server.log_path = log_path
    if wait:
        try:
            wait_for_port("127.0.0.1", port, proc=proc)
        except Exception:
            server.stop()
            raise RuntimeError(f"stalkd did not start:\n{server.log_text()}") from None
    return server
