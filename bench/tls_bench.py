"""TLS listener vs plain listener of the same stalkd, same run, alternating; and beanstalkd
plain vs beanstalkd behind stunnel (Debian's stunnel4) when it is installed.

Cells: put and reserve+delete, 16 connections, pipeline depth 1 and 64, 100-byte bodies, in
memory (the transport is what differs; durability classes are server_bench.py's business).
The load generator is ``GEN_PROCS`` processes of uvloop protocols, the same code for plain and
TLS (the client pays for TLS too: on a small machine shared with the server, the ratio is a
floor for the server's own). Each cell prints jobs/s medians over ``BENCH_ROUNDS`` alternating
rounds, the TLS/plain ratio (target: >= 0.7 at depth 64) and stalkd's CPU time per job on each
listener (what TLS costs the server itself, whatever the generator's share of the machine).

Run: ``.venv/bin/python bench/tls_bench.py`` (env: BENCH_SECONDS per run, default 1.0;
BENCH_ROUNDS, default 3; GEN_PROCS, default 2).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)

SECONDS = float(os.environ.get("BENCH_SECONDS", "1.0"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
GEN_PROCS = int(os.environ.get("GEN_PROCS", "2"))
CONNS = 16
BODY = b"x" * 100


# --- certificates and servers --------------------------------------------------------------


def make_certs(d: Path) -> tuple[str, str, str]:
    """(ca, server cert, server key) for 127.0.0.1, made with openssl."""
    def ossl(*a: str) -> None:
        subprocess.run(["openssl", *a], check=True, capture_output=True)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    ossl("req", "-x509", *ec, "-days", "1", "-subj", "/CN=bench CA", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem")
    ossl("req", *ec, "-subj", "/CN=localhost", "-keyout", f"{d}/srv.key", "-out", f"{d}/srv.csr")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ossl("x509", "-req", "-in", f"{d}/srv.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
         "-set_serial", "1", "-days", "1", "-extfile", f"{d}/san.ext", "-out", f"{d}/srv.pem")
    return f"{d}/ca.pem", f"{d}/srv.pem", f"{d}/srv.key"


def start_stalkd(cert: str, key: str, log: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """stalkd on port 0 with a TLS listener on port 0; (process, plain port, TLS port) from its log."""
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", "0",
                                 "--tls-listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key],
                                stdout=subprocess.DEVNULL, stderr=f)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+), 127\.0\.0\.1:(\d+) \(tls\)", log.read_text())
        if m and "serving" in log.read_text():
            return proc, int(m.group(1)), int(m.group(2))
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    raise RuntimeError(f"stalkd did not start:\n{log.read_text()}")


def start_stunnel_beanstalkd(cert: str, key: str, d: Path) -> tuple[list[subprocess.Popen[bytes]], int, int] | None:
    """beanstalkd and stunnel in front of it, both on port 0 (the ports read from /proc)."""
    bs, st = shutil.which("beanstalkd"), shutil.which("stunnel4") or shutil.which("stunnel")
    if bs is None or st is None:
        return None
    b = subprocess.Popen([bs, "-l", "127.0.0.1", "-p", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [b]
    try:
        plain = wait_for_listener(b, 10, "beanstalkd")
        conf = d / "stunnel.conf"
        conf.write_text(f"foreground = yes\npid =\n[beanstalkd]\naccept = 127.0.0.1:0\n"
                        f"connect = 127.0.0.1:{plain}\ncert = {cert}\nkey = {key}\n")
        procs.append(subprocess.Popen([st, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        tls = wait_for_listener(procs[1], 10, "stunnel")
    except BaseException:
        for p in procs:
            p.kill()
            p.wait()
        raise
    return procs, plain, tls


# --- load generator ------------------------------------------------------------------------


class Driver(asyncio.Protocol):
    """One connection keeping ``depth`` commands in flight; counts completed jobs."""

    def __init__(self, work: str, depth: int, tube: bytes) -> None:
        self.work, self.depth, self.tube = work, depth, tube
        self.buf = b""
        self.done = 0
        self.ready = asyncio.get_running_loop().create_future()
        self.t: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport  # type: ignore[assignment]
        if self.work == "put":
            self.t.write(b"use " + self.tube + b"\r\n")  # type: ignore[union-attr]
        else:
            self.t.write(b"watch " + self.tube + b"\r\nignore default\r\n")  # type: ignore[union-attr]
        self.skip = 1 if self.work == "put" else 2
        self.ready.set_result(None)

    def go(self) -> None:
        assert self.t is not None
        self.t.write(self.cmd() * self.depth)

    def cmd(self) -> bytes:
        return b"put 0 0 60 100\r\n" + BODY + b"\r\n" if self.work == "put" else b"reserve-with-timeout 0\r\n"

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        out = []
        while True:
            i = buf.find(b"\r\n")
            if i < 0:
                break
            line = buf[:i]
            if line.startswith(b"RESERVED"):
                n = int(line.rsplit(b" ", 1)[1])
                if len(buf) < i + 2 + n + 2:
                    break
                out.append(b"delete " + line.split(b" ")[1] + b"\r\n")
                buf = buf[i + 2 + n + 2:]
                continue
            buf = buf[i + 2:]
            if self.skip:
                self.skip -= 1
            elif line.startswith(b"INSERTED") or line == b"DELETED":
                self.done += 1
                out.append(self.cmd())
            elif line == b"TIMED_OUT":
                out.append(self.cmd())
        self.buf = buf
        if out and self.t is not None:
            self.t.writelines(out)


async def _drive(port: int, tls: str | None, work: str, depth: int, conns: int, seconds: float) -> int:
    import uvloop  # noqa: F401 - the loop policy is set by the caller

    loop = asyncio.get_running_loop()
    ctx = ssl.create_default_context(cafile=tls) if tls else None
    drivers = []
    for i in range(conns):
        _, d = await loop.create_connection(lambda i=i: Driver(work, depth, b"t%d" % (i % 4)),
                                            "127.0.0.1", port, ssl=ctx)
        assert d.t is not None
        sock = d.t.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        drivers.append(d)
    for d in drivers:
        d.go()
    await asyncio.sleep(seconds)
    n = sum(d.done for d in drivers)
    for d in drivers:
        if d.t is not None:
            d.t.close()
    return n


def _gen(args: tuple[int, str | None, str, int, int, float]) -> int:
    import uvloop

    return uvloop.run(_drive(*args))


def measure(pool: mp.pool.Pool, port: int, tls: str | None, work: str, depth: int) -> float:
    per = CONNS // GEN_PROCS
    counts = pool.map(_gen, [(port, tls, work, depth, per, SECONDS)] * GEN_PROCS)
    return sum(counts) / SECONDS


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def preload(port: int, jobs: int) -> None:
    """Put ``jobs`` jobs over tubes t0..t3, 10,000 in flight at most (reading every reply
    before sending more: a server stops reading a client that does not read its replies)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        for t in range(4):
            s.sendall(b"use t%d\r\n" % t)
            left, want, buf = jobs // 4, 1, b""
            while left or want:
                n = min(left, 10_000)
                if n:
                    s.sendall((b"put 0 0 60 100\r\n" + BODY + b"\r\n") * n)
                    left -= n
                    want += n
                while want:
                    buf += s.recv(1 << 20)
                    lines = buf.count(b"\r\n")
                    want -= lines
                    buf = buf[buf.rfind(b"\r\n") + 2:] if lines else buf


def sealing_cost(cert: str, key: str, replies: int = 64, flushes: int = 3000) -> None:
    """CPU to seal one pipeline's replies: one buffer per reply (what a TLS transport does with
    writelines) against one joined buffer per flush (what the server hands a TLS transport)."""
    srv_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    srv_ctx.load_cert_chain(cert, key)
    cli_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cli_ctx.check_hostname = False
    cli_ctx.verify_mode = ssl.CERT_NONE
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = srv_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = cli_ctx.wrap_bio(c_in, c_out)
    for _ in range(10):  # a handshake over memory: each side's output is the other's input
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    batch = [b"INSERTED %d\r\n" % (1_000_000 + i) for i in range(replies)]
    costs = {}
    for name, joined in (("one buffer per reply", False), ("joined", True)):
        t = time.process_time()
        for _ in range(flushes):
            if joined:
                server.write(b"".join(batch))
            else:
                for part in batch:
                    server.write(part)
            wire = s_out.read()
        costs[name] = (time.process_time() - t) / (flushes * replies) * 1e6
        print(f"TLS sealing, {replies} replies per flush, {name}: {costs[name]:.2f} us CPU per reply, "
              f"{len(wire)} bytes on the wire per flush")
    print(f"   joined/per-reply sealing CPU {costs['joined'] / costs['one buffer per reply']:.2f}x")


def main() -> int:
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if shutil.which("openssl") is None:
        print("tls_bench: openssl is not installed (scripts/system-deps.sh)")
        return 1
    d = Path(tempfile.mkdtemp(prefix="stalkd-tls-bench-"))
    ca, cert, key = make_certs(d)
    sealing_cost(cert, key)
    proc, plain, tls = start_stalkd(cert, key, d / "stalkd.log")
    peer = start_stunnel_beanstalkd(cert, key, d)
    targets = [("stalkd", plain, None), ("stalkd tls", tls, ca)]
    if peer is not None:
        targets += [("beanstalkd", peer[1], None), ("beanstalkd+stunnel", peer[2], ca)]
    else:
        print("(beanstalkd or stunnel4 missing: stalkd only)")
    print(f"{CONNS} conns, 100 B bodies, in memory, {SECONDS}s x {ROUNDS} rounds alternating, "
          f"GEN_PROCS={GEN_PROCS}, {os.cpu_count()} CPUs; jobs/s medians")
    pool = mp.get_context("spawn").Pool(GEN_PROCS)
    plain_of = {"stalkd": plain, "stalkd tls": plain}  # where reserve+delete's jobs are put
    if peer is not None:
        plain_of.update({"beanstalkd": peer[1], "beanstalkd+stunnel": peer[1]})
    try:
        for work in ("put", "rd"):
            for depth in (1, 64):
                results: dict[str, list[float]] = {name: [] for name, _, _ in targets}
                cpu_us: dict[str, list[float]] = {"stalkd": [], "stalkd tls": []}  # server, per job
                for r in range(ROUNDS):
                    order = targets if r % 2 == 0 else targets[::-1]
                    for name, port, cafile in order:
                        if work == "rd":
                            preload(plain_of[name], int((150_000 if depth == 64 else 40_000) * SECONDS))
                        c0 = cpu_seconds(proc.pid)
                        rate = measure(pool, port, cafile, work, depth)
                        if name in cpu_us:
                            cpu_us[name].append((cpu_seconds(proc.pid) - c0) / max(rate * SECONDS, 1) * 1e6)
                        results[name].append(rate)
                med = {k: statistics.median(v) for k, v in results.items()}
                line = "  ".join(f"{k} {v:>9,.0f}" for k, v in med.items())
                ratio = (f"tls/plain {med['stalkd tls'] / med['stalkd']:.2f} (server CPU/job "
                         f"{statistics.median(cpu_us['stalkd tls']):.0f} vs "
                         f"{statistics.median(cpu_us['stalkd']):.0f} us)")
                if peer is not None:
                    ratio += (f"  stunnel/beanstalkd {med['beanstalkd+stunnel'] / med['beanstalkd']:.2f}"
                              f"  stalkd-tls/beanstalkd+stunnel {med['stalkd tls'] / med['beanstalkd+stunnel']:.2f}")
                print(f"{work:>3} depth {depth:>2}: {line}  | {ratio}", flush=True)
    finally:
        pool.close()
        pool.join()
        proc.terminate()
        proc.wait()
        for p in (peer[0] if peer else []):
            p.terminate()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
