"""A real etcd (Debian's etcd-server) for one test or module, on UNIX sockets in its own
directory, started and stopped by PID.

UNIX sockets rather than TCP port 0: etcd 3.4's JSON gateway dials the address it was told to
listen on, so with ``127.0.0.1:0`` every gateway request fails; a socket path cannot clash with
another test's server the way a chosen port could.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
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
    ca: str | None = None  # TLS: the CA of etcd's certificate (and of its clients')

    @property
    def socket(self) -> str:
        return str(self.directory / "client:1")

    def cluster(self, name: str = "test", *, cert: str | None = None, key: str | None = None) -> str:
        """The stalkd cluster address of this etcd with the prefix ``/stalkd/<name>`` (over TLS,
        presenting ``cert``/``key``, when etcd was started with TLS)."""
        if self.ca is None:
            return f"etcd+unix://{quote(self.socket, safe='')}/stalkd/{name}"
        query = "&".join(f"{k}={v}" for k, v in (("ca", self.ca), ("cert", cert), ("key", key)) if v)
        return f"etcds+unix://{quote(self.socket, safe='')}/stalkd/{name}?{query}"

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


def start_etcd(directory: Path, timeout: float = 30.0, *, tls: tuple[str, str, str] | None = None,
               probe_cert: tuple[str, str] | None = None) -> EtcdProcess:
    """Start a one-member etcd whose files are all in ``directory``; returns once it answers.
    ``tls``: (CA, certificate, key): TLS on the client socket, client certificates of that CA
    required (the readiness probe presents ``probe_cert``)."""
    exe = require_binary("etcd")
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "etcd.log"
    client = "unixs://client:1" if tls else "unix://client:1"
    # etcd names a UNIX socket HOST:PORT in its working directory.
    cmd = [exe, "--data-dir", "data", "--name", "one",
           "--listen-client-urls", client, "--advertise-client-urls", client,
           "--listen-peer-urls", "unix://peer:2", "--initial-advertise-peer-urls", "unix://peer:2",
           "--initial-cluster", "one=unix://peer:2", "--log-level", "warn", "--logger", "zap"]
    if tls:
        cmd += ["--trusted-ca-file", tls[0], "--cert-file", tls[1], "--key-file", tls[2],
                "--client-cert-auth"]
    proc = popen_logged(cmd, log, cwd=directory)
    server = EtcdProcess(proc, directory, log, tls[0] if tls else None)
    from stalkd.ha.address import parse_cluster
    from stalkd.ha.etcd import Etcd, EtcdError

    cert, key = probe_cert or (None, None)
    client = Etcd(parse_cluster(server.cluster(cert=cert, key=key)), timeout=1.0)
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


class UnixProxy:
    """A UNIX-socket forwarder to ``target`` that a test can cut and heal: one node's way to
    etcd, so that node alone is partitioned from it (the others reach etcd directly)."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = path
        self.target = target
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.heal()

    def address(self, prefix: str = "/stalkd/test") -> str:
        return f"etcd+unix://{quote(str(self.path), safe='')}{prefix}"

    def heal(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            s.bind(str(self.path))
            s.listen(64)
            self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def cut(self) -> None:
        """No new connection gets through (the socket file is gone), and open ones end."""
        with self._lock:
            s, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if s is not None:
            s.close()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target)
            except OSError:
                client.close()
                upstream.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
