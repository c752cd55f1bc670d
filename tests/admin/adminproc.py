"""A real ``stalkd serve -p 0 --admin 127.0.0.1:0`` process, its ports read from its log.

Both listeners bind port 0; the server logs the ports it got, so nothing picks a "free" port
that another process could take first. Stopped by PID by the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import greenstalk

from support import session_file  # tests/support.py

SERVER_CMD = [sys.executable, "-m", "stalkd.cli", "serve"]


@dataclass
class AdminServer:
    proc: subprocess.Popen[bytes]
    log_path: str
    port: int = 0  # the beanstalkd protocol port
    admin: str = ""  # http://127.0.0.1:PORT
    token: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """(status, parsed JSON or text) of one HTTP request to the admin endpoint."""
        data = None if body is None else json.dumps(body).encode()
        h = dict(self.headers)
        if data is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        req = urllib.request.Request(self.admin + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, raw, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
        return status, (json.loads(raw) if "json" in ctype else raw.decode())

    def get(self, path: str) -> Any:
        status, data = self.request("GET", path)
        assert status == 200, (status, data)
        return data

    def post(self, path: str, body: Any) -> Any:
        status, data = self.request("POST", path, body)
        assert status == 200, (status, data)
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def start_admin_server(*flags: str, admin: str = "127.0.0.1:0", token: str | None = None,
                       timeout: float = 30.0) -> AdminServer:
    """Start the server and wait (reading its log, not sleeping blindly) until both listen."""
    fd, log_path = session_file("stalkd-admin-", ".log")
    args = [*SERVER_CMD, "-l", "127.0.0.1", "-p", "0", "--admin", admin, *flags]
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
    srv = AdminServer(proc, log_path, token=token)
    if token:
        srv.headers["Authorization"] = f"Bearer {token}"
    deadline = time.monotonic() + timeout
    while True:
        text = srv.log_text()
        port = re.search(r"stalkd listening on 127\.0\.0\.1:(\d+)", text)
        url = re.search(r"admin endpoint on (https?://\S+?)/ ", text)
        if port and url:
            srv.port, srv.admin = int(port.group(1)), url.group(1)
            return srv
        if proc.poll() is not None or time.monotonic() > deadline:
            srv.stop()
            raise RuntimeError(f"stalkd --admin did not start:\n{text}")
        time.sleep(0.02)


def make_tubes(port: int, n: int, *, more: int = 0, internal: bool = False) -> None:
    """Tubes t00000 to t{n-1} of one job each, the last with ``more`` jobs more (the busiest);
    with ``internal``, one job in stalkd.failed too."""
    c = greenstalk.Client(("127.0.0.1", port))
    try:
        for i in range(n):
            c.use(f"t{i:05d}")
            c.put("x")
        for _ in range(more):
            c.put("more")
        if internal:
            c.use("stalkd.failed")
            c.put("internal")
    finally:
        c.close()
