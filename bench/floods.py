"""The floods of issue 30 for bench/stall_bench.py: what a probe client waits and what the
server's RSS does while many clients hold its memory, and while the admin endpoint serves 100k
tubes.

Each case runs against a server started by ``server_bench`` (stalkd, or a peer tree with
``--peer-src``), measures the probe's round trips (``peek 0``, one in flight) for the whole
case, and the server's RSS before the flood, at its peak (``VmHWM``) and a few seconds after
the clients left (the time the server has to give memory back), and the longest loop turn in
CPU time (bench/loopmeter: what the loop held, whatever the machine's load adds to the
probe's wall-clock waits):

  readers-flood     1,000 connections each sending list-tubes (1,200 tubes: ~36 KB a reply)
                    120 times and never reading
  readers-squeeze   the same under ``--max-memory 100M``: the budget stops and lets go of the
                    readers over and over within the 8 s, at any load (under the default
                    budget, 512 MiB here, only a quiet machine runs enough of their commands
                    to reach it)
  big-puts          40 clients each sending one 16 MiB put (``-z 16777216``) at once; the jobs
                    are deleted before "after"
  handshake-flood   5,000 connections to the TLS listener each sending a client hello and
                    nothing more; "refused" counts those the server cut at once
  admin-100k        100k tubes of one job and 900k jobs delayed in one more: each call of
                    ``ADMIN_CALLS`` in turn (the dashboard's and ``stalkd top``'s routes,
                    /metrics, health probes, list-tubes and stats, a move of the 900k jobs
                    through the admin API, ``kick 1000000`` of them, their bulk delete); the
                    time, answer size and the probe's longest wait of each call are printed
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol

import server_bench

from server.wire import flood_unread, proc_status  # tests/server/wire.py
from support import listening_ports  # tests/support.py (tests/ is on the path through server_bench)

FLOODS = ("readers-flood", "readers-squeeze", "big-puts", "handshake-flood", "admin-100k")
READERS = ("readers-flood", "readers-squeeze")
MB = 2**20


class Probe(Protocol):
    """stall_bench's probe: round trips of ``peek 0`` on its own connection until stopped."""

    sock: socket.socket
    rtts: list[float]
    stop: threading.Event

    def start(self) -> None: ...
    def join(self) -> None: ...


def _figures(probe: Probe) -> tuple[float, float]:
    """(p99, max) of the probe's round trips in ms, once it is stopped."""
    probe.stop.set()
    probe.join()
    probe.sock.close()
    r = sorted(probe.rtts) or [0.0]
    return r[int(0.99 * (len(r) - 1))] * 1e3, r[-1] * 1e3


def _pipeline(s: socket.socket, data: bytes, replies: int) -> None:
    s.sendall(data)
    got = b""
    while got.count(b"\r\n") < replies:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise RuntimeError("server closed the connection")
        got += chunk


def _readers(port: int, _srv: server_bench.Server, _ctx: dict[str, Any]) -> tuple[Callable[[], str], list[socket.socket]]:
    w = socket.create_connection(("127.0.0.1", port))
    _pipeline(w, b"".join(b"watch t%07d" % i + b"x" * 20 + b"\r\n" for i in range(1200)), 1200)
    return (lambda: ""), [w]


def _readers_flood(port: int) -> list[socket.socket]:
    return [flood_unread(port, b"list-tubes\r\n" * 120) for _ in range(1000)]


_PUTS = """
import socket, sys, threading
port, n, size = map(int, sys.argv[1:])
body = b"b" * size
ids = []

def put():
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"put 0 0 60 %d\\r\\n" % size + body + b"\\r\\n")
        s.settimeout(300)
        got = b""
        while b"\\r\\n" not in got:
            chunk = s.recv(100)
            if not chunk:
                break
            got += chunk
        if got.startswith(b"INSERTED"):
            ids.append(got.split()[1].decode())

threads = [threading.Thread(target=put) for _ in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(" ".join(ids))
"""


def _big_puts(port: int, n: int = 40) -> str:
    # The senders run in a process of their own: as threads of this one, 40 of them contend
    # for the GIL with the probe's thread, whose waits then measure that contention.
    out = subprocess.run([sys.executable, "-c", _PUTS, str(port), str(n), str(16 * MB)],
                         check=True, capture_output=True, text=True).stdout
    ids = out.split()
    with socket.create_connection(("127.0.0.1", port)) as s:
        _pipeline(s, b"".join(b"delete %s\r\n" % i.encode() for i in ids), len(ids))
    return f"{len(ids)}/{n} inserted"


def _client_hello() -> bytes:
    ctx = ssl.create_default_context()
    obj = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def _handshake_flood(port: int, n: int = 5000) -> tuple[list[socket.socket], str]:
    hello = _client_hello()
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        socks.append(s)
    time.sleep(0.5)
    cut = 0
    sent = []
    for s in socks:
        try:
            s.send(hello)
            sent.append(s)
        except OSError:
            cut += 1
    time.sleep(2.0)  # the server reads the hellos and answers (or cuts) meanwhile
    for s in sent:  # each cut once: a send that failed is not looked at again
        try:
            if s.recv(1, socket.MSG_PEEK) == b"":
                cut += 1
        except BlockingIOError:
            pass
        except OSError:
            cut += 1
    return socks, f"{cut}/{n} cut"


def _certs() -> tuple[str, str]:
    d = tempfile.mkdtemp(prefix="bench-tls-")
    cert, key = os.path.join(d, "c.pem"), os.path.join(d, "c.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


def _http(method: str, url: str, body: Any = None) -> tuple[float, int]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=900) as r:
        n = len(r.read())
    return time.perf_counter() - t0, n


def _admin_setup(port: int, tubes: int, jobs: int) -> None:
    """``tubes`` tubes of one ready job, and the other jobs delayed an hour in tube ``big``."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        for i in range(0, tubes, 5000):
            k = min(5000, tubes - i)
            _pipeline(s, b"".join(b"use a%07d\r\nput 0 0 60 1\r\nx\r\n" % (i + j) for j in range(k)), 2 * k)
        _pipeline(s, b"use big\r\n", 1)
        for i in range(0, jobs - tubes, 5000):
            k = min(5000, jobs - tubes - i)
            _pipeline(s, b"put 0 3600 60 1\r\nx\r\n" * k, k)


def _command(port: int, line: bytes) -> int:
    """Send one protocol command (after ``use moved``) and read its whole reply: its size."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(900)
        s.sendall(b"use moved\r\n" + line + b"\r\n")
        got = b""
        while got.count(b"\r\n") < 2:
            got += s.recv(1 << 20)
        head = got.split(b"\r\n")[1].split()
        if head[0] == b"OK":  # a YAML body follows
            want = got.index(b"\r\n", got.index(b"\r\n") + 2) + 2 + int(head[1]) + 2
            while len(got) < want:
                got += s.recv(1 << 20)
        return len(got)


# Every admin call the dashboard and ``stalkd top`` make, the scrape, the probes of an
# orchestrator, and the commands that read or move many jobs at once (issue 30): each runs
# alone while the probe measures. "moved" is the tube the move fills; the kick and the
# delete then act on its 900k delayed jobs.
ADMIN_CALLS: tuple[tuple[str, str, Any], ...] = (
    ("GET", "/healthz", None), ("GET", "/readyz", None),
    ("GET", "/metrics", None), ("GET", "/api/v1/overview", None), ("GET", "/metrics", None),
    ("GET", "/api/v1/overview?offset=99500", None),
    ("GET", "/api/v1/overview?sort=jobs&limit=50", None),
    ("GET", "/api/v1/overview?q=a0099&limit=50", None),
    ("GET", "/api/v1/buried?limit=50", None), ("GET", "/api/v1/workers", None),
    ("GET", "/api/v1/replication", None), ("GET", "/api/v1/tubes/big", None),
    ("GET", "/api/v1/tubes/big/jobs?state=delayed", None), ("GET", "/api/v1/jobs/1", None),
    ("CMD", "list-tubes", None), ("CMD", "stats", None), ("CMD", "stats-tube big", None),
    ("CMD", "pause-tube big 1", None),
    ("POST", "/api/v1/jobs/move", {"tube": "big", "state": "delayed", "to": "moved"}),
    ("CMD", "kick 1000000", None),
    ("POST", "/api/v1/jobs/delete", {"tube": "moved", "state": "ready"}),
)


def _admin_calls(base: str, port: int, probe: Probe) -> str:
    """Each call's time, answer size and the probe's longest wait meanwhile."""
    out = []
    for method, path, body in ADMIN_CALLS:
        seen = len(probe.rtts)
        if method == "CMD":
            t0 = time.perf_counter()
            n = _command(port, path.encode())
            took = time.perf_counter() - t0
        else:
            took, n = _http(method, base + path, body)
        time.sleep(0.05)  # the probe's round trip that overlapped the call's end is counted
        waits = probe.rtts[seen:] or [0.0]
        name = path if method == "CMD" else path.removeprefix("/api/v1")
        out.append(f"\n    {name:<34} {took:7.2f}s {n / MB:6.2f}MB probe max {max(waits) * 1e3:6.0f}ms")
    return "".join(out)


def run(kind: str, case: str, probe_of: Callable[[int], Probe], *, admin_tubes: int,
        admin_jobs: int) -> str:
    """One case on a server of ``kind`` (stalkd or the peer): its row of figures."""
    extra: tuple[str, ...] = ()
    if case == "big-puts":
        extra = ("-z", str(16 * MB))
    elif case == "handshake-flood":
        cert, key = _certs()
        extra = ("--tls-listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
    elif case == "admin-100k":
        extra = ("--admin", "127.0.0.1:0")
    elif case == "readers-squeeze":
        extra = ("--max-memory", "100M")
    srv = _metered(kind, extra, meter := os.path.join(tempfile.mkdtemp(prefix="bench-loopmeter-"), "gaps"))
    pid = srv.proc.pid
    keep: list[socket.socket] = []
    note = ""
    try:
        other: list[int] = []
        for _ in range(1000):  # the admin endpoint listens once recovery is done, after the port
            other = [p for p in listening_ports(pid) if p != srv.port]
            if other or case in (*READERS, "big-puts"):
                break
            time.sleep(0.01)
        if case in READERS:
            _, keep = _readers(srv.port, srv, {})
        elif case == "admin-100k":
            _admin_setup(srv.port, admin_tubes, admin_jobs)
        before = proc_status(pid, "VmRSS")
        probe = probe_of(srv.port)
        probe.start()
        time.sleep(0.2)
        flood: list[socket.socket] = []
        if case in READERS:
            flood = _readers_flood(srv.port)
            time.sleep(8.0)  # the server runs what it can of their commands meanwhile
        elif case == "big-puts":
            note = _big_puts(srv.port)
        elif case == "handshake-flood":
            flood, note = _handshake_flood(other[0])
        else:
            note = _admin_calls(f"http://127.0.0.1:{other[0]}", srv.port, probe)
        peak = proc_status(pid, "VmHWM")
        for s in flood:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        time.sleep(3.0)  # the clients are gone: the server may give memory back meanwhile
        p99, mx = _figures(probe)
        after = proc_status(pid, "VmRSS")
    finally:
        for s in keep:
            s.close()
        srv.stop()
    turn = _longest_turn(meter)
    return (f"{p99:7.1f} {mx:8.1f} {turn:8.1f}   {before / MB:6.0f} {peak / MB:6.0f} {after / MB:6.0f}"
            + (f"   {note}" if note else ""))


_METER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loopmeter")


def _metered(kind: str, extra: tuple[str, ...], meter: str) -> server_bench.Server:
    """A server of ``kind`` in memory with the loop meter (bench/loopmeter) writing to ``meter``."""
    saved = dict(os.environ)
    peer = server_bench.PEER_SRC
    try:
        os.environ["STALKD_BENCH_LOOPMETER"] = meter
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_METER_DIR, os.environ.get("PYTHONPATH")]))
        if peer is not None:  # the peer's PYTHONPATH is its tree: the meter goes after it
            server_bench.PEER_SRC = peer + os.pathsep + _METER_DIR
        return server_bench.start(kind, "memory", extra)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server_bench.PEER_SRC = peer


def _longest_turn(meter: str) -> float:
    """The longest loop turn the meter saw, in CPU ms (0 if the server wrote nothing)."""
    try:
        with open(meter) as f:
            gaps = [float(line.split()[0]) for line in f]
        os.unlink(meter)
    except OSError:
        return float("nan")  # Debian's beanstalkd: no meter
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(meter))
    return max(gaps, default=0.0) * 1e3


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main_rows(cases: list[str], peer: str | None, probe_of: Callable[[int], Probe],
              admin_tubes: int, admin_jobs: int) -> None:
    raise_fd_limit()
    print(f"# floods (issue 30): probe p99 / max round trip (ms); longest loop turn (CPU ms); server "
          f"RSS MB before, peak (VmHWM), 3 s after the clients left; load {os.getloadavg()[0]:.1f}")
    print(f"{'case':<16} {'server':<13} {'p99':>7} {'max':>8} {'turn':>8}   {'before':>6} {'peak':>6} {'after':>6}")
    for case in cases:
        for kind, label in (("stalkd", "stalkd"), ("beanstalkd", "peer" if peer else "beanstalkd")):
            if kind == "beanstalkd" and case in ("handshake-flood", "admin-100k") and not peer:
                continue  # beanstalkd has neither TLS nor an admin endpoint
            row = run(kind, case, probe_of, admin_tubes=admin_tubes, admin_jobs=admin_jobs)
            print(f"{case:<16} {label:<13} {row}", flush=True)
