"""Certificates made by the test with openssl, and stalkd started on port 0 with TLS listeners.

Every port is the one the server reports in its log after binding port 0.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from support import ServerProcess, require_binary, session_file  # tests/support.py

SERVER_CMD = [sys.executable, "-m", "stalkd.node.cli"]


def _openssl(*args: str) -> None:
    subprocess.run([require_binary("openssl"), *args], check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Pair:
    cert: str
    key: str


def make_ca(d: Path, name: str) -> Pair:
    """A self-signed CA ``name``."""
    pair = Pair(str(d / f"{name}.pem"), str(d / f"{name}.key"))
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-days", "2", "-subj", f"/O=stalkd tests/CN={name}", "-keyout", pair.key, "-out", pair.cert)
    return pair


def issue(d: Path, ca: Pair, name: str, subject: str, *, server: bool = False) -> Pair:
    """A certificate for ``subject`` signed by ``ca`` (``server``: valid for 127.0.0.1)."""
    pair = Pair(str(d / f"{name}.pem"), str(d / f"{name}.key"))
    csr = str(d / f"{name}.csr")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-subj", subject, "-keyout", pair.key, "-out", csr)
    ext = d / f"{name}.ext"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n" if server else
                   "extendedKeyUsage=clientAuth\n")
    _openssl("x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-set_serial",
             str(int.from_bytes(os.urandom(8), "big")), "-days", "2", "-extfile", str(ext), "-out", pair.cert)
    return pair


@dataclass
class Certs:
    """A CA, a server certificate, two clients of that CA and one of another CA."""

    dir: Path
    ca: Pair
    server: Pair
    producer: Pair  # CN=producer,O=stalkd tests
    ops: Pair  # CN=ops,O=stalkd tests
    stranger: Pair  # signed by another CA
    other_ca: Pair = field(repr=False)


def make_certs(d: Path) -> Certs:
    ca = make_ca(d, "ca")
    other = make_ca(d, "other-ca")
    return Certs(d, ca, issue(d, ca, "server", "/CN=localhost", server=True),
                 issue(d, ca, "producer", "/O=stalkd tests/CN=producer"),
                 issue(d, ca, "ops", "/O=stalkd tests/CN=ops"),
                 issue(d, other, "stranger", "/O=stalkd tests/CN=producer"), other)


class Stalkd(ServerProcess):
    """stalkd started with ``-p 0``; its listeners as the log reports them."""

    log_path: str = ""
    listeners: dict[str, str]  # "plain" / "tls" / "unix" -> address

    def log_text(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def wait_log(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """Poll the log until ``pattern`` appears (the server's own report, not a guess)."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.log_text())
            if m:
                return m
            if self.proc.poll() is not None:
                raise RuntimeError(f"stalkd exited ({self.proc.returncode}):\n{self.log_text()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {pattern!r} in the log:\n{self.log_text()}")
            time.sleep(0.01)

    @property
    def tls(self) -> str:
        return self.listeners["tls"]


def start(*flags: str, plain: tuple[str, ...] = ("-l", "127.0.0.1", "-p", "0")) -> Stalkd:
    fd, log_path = session_file("stalkd-tls-", ".log")
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen([*SERVER_CMD, *plain, *flags], stdout=subprocess.DEVNULL, stderr=log)
    s = Stalkd("127.0.0.1", 0, proc)
    s.log_path = log_path
    try:
        line = s.wait_log(r"stalkd listening on (.*?), (in memory|data dir)").group(1)
        s.wait_log(r"serving \d+ ms after start")
    except Exception:
        s.stop()
        raise
    s.listeners = {}
    for part in line.split(", "):
        addr, _, kind = part.partition(" (")
        s.listeners.setdefault(kind.rstrip(")") or "plain", addr)
    if "plain" in s.listeners:
        host, _, port = s.listeners["plain"].rpartition(":")
        s.host, s.port = host, int(port)
    return s


_SHARED: tuple[Certs, str] | None = None


def shared_certs() -> tuple[Certs, str]:
    """Certificates and an ACL file made once per test process (removed at exit)."""
    global _SHARED
    if _SHARED is None:
        import atexit
        import shutil

        d = Path(tempfile.mkdtemp(prefix="stalkd-certs-"))
        atexit.register(shutil.rmtree, d, True)
        acl = d / "acl.toml"
        acl.write_text('[identity."CN=ops,O=stalkd tests"]\nput = ["*"]\nwatch = ["*"]\nadmin = true\n')
        _SHARED = (make_certs(d), str(acl))
    return _SHARED


def secured_flags() -> tuple[str, ...]:
    """A TLS listener with client certificates and an ACL, beside the plain one."""
    certs, acl = shared_certs()
    return ("--tls-listen", "127.0.0.1:0", "--tls-cert", certs.server.cert, "--tls-key",
            certs.server.key, "--tls-client-ca", certs.ca.cert, "--acl", acl)
