"""A real etcd (Debian's etcd-server) for one test or module, on UNIX sockets in its own
directory, started and stopped by PID.

UNIX sockets rather than TCP port 0: etcd 3.4's JSON gateway dials the address it was told to
listen on, so with ``127.0.0.1:0`` every gateway request fails; a socket path cannot clash with
another test's server the way a chosen port could.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from support import log_tail, popen_logged, require_binary


@dataclass
class EtcdProcess:
    proc: subprocess.Popen[bytes]
    directory: Path
    log: Path

    @property
    def socket(self) -> str:
        return str(self.directory / "client:1")

    def cluster(self, name: str = "test") -> str:
        """The stalkd cluster address of this etcd with the prefix ``/stalkd/<name>``."""
        return f"etcd+unix://{quote(self.socket, safe='')}/stalkd/{name}"

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_etcd(directory: Path, timeout: float = 30.0) -> EtcdProcess:
    """Start a one-member etcd whose files are all in ``directory``; returns once it answers."""
    exe = require_binary("etcd")
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "etcd.log"
    # etcd names a UNIX socket HOST:PORT in its working directory.
    cmd = [exe, "--data-dir", "data", "--name", "one",
           "--listen-client-urls", "unix://client:1", "--advertise-client-urls", "unix://client:1",
           "--listen-peer-urls", "unix://peer:2", "--initial-advertise-peer-urls", "unix://peer:2",
           "--initial-cluster", "one=unix://peer:2", "--log-level", "warn", "--logger", "zap"]
    proc = popen_logged(cmd, log, cwd=directory)
    server = EtcdProcess(proc, directory, log)
    from stalkd.ha.address import parse_cluster
    from stalkd.ha.etcd import Etcd, EtcdError

    client = Etcd(parse_cluster(server.cluster()), timeout=1.0)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.get("/probe")
            return server
        except EtcdError as e:
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise AssertionError(f"etcd did not answer ({e}):\n{log_tail(log)}") from None
        time.sleep(0.05)
