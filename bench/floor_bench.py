"""The ceiling for a Python server: a trivial uvloop server vs stalkd vs beanstalkd, same run.

The "floor" server parses only what a put needs and answers ``INSERTED n``: no engine, no
records, no stats. Whatever it cannot reach, no Python server on uvloop reaches on this machine
either, so its ratio to beanstalkd is the bound for stalkd's in-memory put cells, and the gap
between stalkd and the floor is stalkd's own per-command cost (parser, engine, server glue).

Run: ``.venv/bin/python bench/floor_bench.py`` (about 30 s; BENCH_SECONDS, BENCH_ROUNDS as
for server_bench.py). ``--serve PORT`` runs only the trivial server.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys

import server_bench as sb


class _Floor(asyncio.Protocol):
    """put -> INSERTED n; use/watch/other lines get a fixed short reply."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.n = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        out = []
        pos = 0
        while True:
            i = buf.find(b"\r\n", pos)
            if i < 0:
                break
            line = buf[pos:i]
            if line.startswith(b"put "):
                end = i + 2 + int(line.rsplit(b" ", 1)[1]) + 2
                if len(buf) < end:
                    break
                pos = end
                self.n += 1
                out.append(b"INSERTED %d\r\n" % self.n)
            else:
                pos = i + 2
                out.append(b"USING x\r\n" if line.startswith(b"use ") else b"WATCHING 2\r\n")
        self.buf = buf[pos:]
        if out and self.transport is not None:
            self.transport.writelines(out)


async def _serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_server(_Floor, "127.0.0.1", port)
    await asyncio.Event().wait()


def _start_floor() -> sb.Server:
    port = sb._free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    sb._wait_port(port, proc)
    return sb.Server("floor", proc, port, None, "memory")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", type=int, metavar="PORT", help="run only the trivial server")
    args = ap.parse_args()
    if args.serve:
        import uvloop

        uvloop.run(_serve(args.serve))
        return 0
    servers = {"floor": _start_floor(), "stalkd": sb.start("stalkd", "memory"),
               "beanstalkd": sb.start("beanstalkd", "memory")}
    print(f"# floor_bench: put 100 B in memory, {sb.SECONDS} s per run, {sb.ROUNDS} rounds, "
          f"medians; us = server CPU per job")
    print(f"{'conns':>5} {'depth':>5} | {'floor/s':>8} {'us':>5} | {'stalkd/s':>8} {'us':>5} | "
          f"{'beanstalkd/s':>12} {'us':>5} | floor/bs stalkd/bs stalkd/floor")
    try:
        for conns, depth in [(1, 1), (16, 1), (1, 64), (16, 64)]:
            rates: dict[str, list[float]] = {k: [] for k in servers}
            cpus: dict[str, list[float]] = {k: [] for k in servers}
            for r in range(sb.ROUNDS):
                order = list(servers) if r % 2 == 0 else list(reversed(servers))
                for k in order:
                    jobs, srv_pct, _ = sb.run_cell(servers[k], "put", 100, conns, depth)
                    rates[k].append(jobs)
                    cpus[k].append(1e4 * srv_pct / jobs)
            f, s, b = (statistics.median(rates[k]) for k in ("floor", "stalkd", "beanstalkd"))
            fu, su, bu = (statistics.median(cpus[k]) for k in ("floor", "stalkd", "beanstalkd"))
            print(f"{conns:>5} {depth:>5} | {f:8.0f} {fu:5.1f} | {s:8.0f} {su:5.1f} | {b:12.0f} "
                  f"{bu:5.1f} | {f / b:7.2f}x {s / b:8.2f}x {s / f:11.2f}x", flush=True)
    finally:
        for srv in servers.values():
            srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
