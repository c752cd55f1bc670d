"""Where a request's CPU goes inside the server, without sockets: stalkd vs the floor server.

A loaded machine makes throughput runs noisy (bench/server_bench.py, bench/floor_bench.py);
this one drives the server's own objects in one process, on the CPU clock, with a transport
that only counts bytes, so it isolates the Python work per request that the kernel and the
event loop do not explain:

- ``stalkd``: ``Connection.data_received`` of an in-memory ``Server`` (parser, ``execute``,
  engine, reply encoding, the reply queue, ``writelines``), as ``stalkd serve`` runs it;
- ``floor``: bench/floor_bench.py's trivial protocol object (find the line, answer);
- the stages measured alone on the same requests: ``parser`` (feed + next), ``engine``
  (``Engine.apply`` on parsed commands) and ``encode`` (reply values to bytes); ``glue`` is
  what stalkd's total leaves after them: the per-request work outside the parser and the
  engine (``execute`` and ``_handle``, barriers, the clock, the timer check, ``send``, the
  output list, ``writelines``, the begin/end step hooks).

Each cell is one client's request pattern: ``put`` at depth 1 (one read per put) or 64 (one
read per 64 puts), ``rd`` at depth 1 (reserve-with-timeout 0, then delete, one read each).
It runs twice, once per implementation (a child process with ``STALKD_NO_EXTENSIONS=1`` for
the pure-Python one), and prints µs per job and the ratios in one table.

Run: ``.venv/bin/python bench/glue_bench.py`` (``--jobs N``, default 20000).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from floor_bench import _Floor  # noqa: E402

from stalkd.engine import Engine  # noqa: E402
from stalkd.protocol import NEED_DATA, Parser, accel, encode_line, encode_reply_parts  # noqa: E402
from stalkd.protocol.commands import Reply  # noqa: E402
from stalkd.server.app import Server  # noqa: E402
from stalkd.server.config import Config  # noqa: E402
from stalkd.server.storage import MemoryStorage  # noqa: E402

BODY = b"x" * 100


class _Transport:
    """What a connection writes to: counts bytes, never blocks."""

    def __init__(self) -> None:
        self.bytes = 0

    def writelines(self, parts: list[bytes]) -> None:
        for p in parts:
            self.bytes += len(p)

    def write(self, data: bytes) -> None:
        self.bytes += len(data)

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


def _reads(work: str, depth: int, jobs: int) -> list[bytes]:
    """The reads one client's requests arrive in (``rd`` needs the jobs put first)."""
    put = b"put 0 0 120 %d\r\n%s\r\n" % (len(BODY), BODY)
    if work == "put":
        return [put * depth] * (jobs // depth)
    out: list[bytes] = []
    for i in range(jobs):
        out.append(b"reserve-with-timeout 0\r\n")
        out.append(b"delete %d\r\n" % (i + 1))
    return out


def _cpu(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def _stalkd(work: str, depth: int, jobs: int) -> dict[str, float]:
    stage: dict[str, float] = {}
    puts = _reads("put", 64, jobs)

    def server() -> tuple[Server, Any]:
        srv = Server(Config(), Engine(records=False), MemoryStorage())
        conn = srv.new_connection()
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        if work == "rd":
            for r in puts:  # the stock to reserve, not timed
                conn.data_received(r)
        return srv, conn

    reads = _reads(work, depth, jobs)

    async def total() -> float:
        best = float("inf")
        for _ in range(3):
            _, conn = server()
            t0 = time.process_time()
            for r in reads:
                conn.data_received(r)
            best = min(best, time.process_time() - t0)
        return best

    stage["stalkd"] = asyncio.run(total())

    def parse() -> list[object]:
        p = Parser()
        out: list[object] = []
        for r in reads:
            p.feed(r)
            while (item := p.next()) is not NEED_DATA:
                out.append(item)
        return out

    stage["parser"] = _cpu(parse)
    cmds = parse()

    def engine() -> list[object]:
        e = Engine(records=False)
        e.connect(1, 1.0)
        if work == "rd":
            p = Parser()
            for r in puts:
                p.feed(r)
                while (item := p.next()) is not NEED_DATA:
                    e.apply(1, item, 1.0)  # type: ignore[arg-type]
        t0 = time.process_time()
        replies = [e.apply(1, c, 1.0).reply for c in cmds]  # type: ignore[arg-type]
        stage.setdefault("engine", float("inf"))
        stage["engine"] = min(stage["engine"], time.process_time() - t0)
        return replies

    for _ in range(3):
        replies = engine()

    def encode() -> None:
        for r in replies:
            if type(r) is Reply:
                encode_line(r)
            else:
                encode_reply_parts(r)  # type: ignore[arg-type]

    stage["encode"] = _cpu(encode)
    stage["glue"] = stage["stalkd"] - stage["parser"] - stage["engine"] - stage["encode"]
    return {k: v / jobs * 1e6 for k, v in stage.items()}


def _floor(work: str, depth: int, jobs: int) -> float:
    reads = _reads(work, depth, jobs)

    def run() -> None:
        f = _Floor()
        f.connection_made(_Transport())  # type: ignore[arg-type]
        for r in reads:
            f.data_received(r)

    return _cpu(run) / jobs * 1e6


CELLS = [("put", 1), ("put", 64), ("rd", 1)]


def child(jobs: int) -> None:
    out = {}
    for work, depth in CELLS:
        cell = _stalkd(work, depth, jobs)
        cell["floor"] = _floor(work, depth, jobs)
        out[f"{work} {depth}"] = cell
    print(json.dumps({"implementation": accel.IMPLEMENTATION, "cells": out}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.jobs)
        return 0
    runs = []
    for off in ("", "1"):
        env = {**os.environ, "STALKD_NO_EXTENSIONS": off}
        r = subprocess.run([sys.executable, __file__, "--child", "--jobs", str(args.jobs)],
                           env=env, capture_output=True, text=True, check=True)  # fmt: skip
        runs.append(json.loads(r.stdout))
    print(f"# glue_bench: µs of CPU per job, in process, no sockets; {args.jobs} jobs per cell, "
          f"best of 3; load {os.getloadavg()[0]:.1f}")
    print("# glue = stalkd - parser - engine - encode: the server's own per-request work")
    print(f"{'impl':7} {'cell':7} | {'stalkd':>7} {'parser':>7} {'engine':>7} {'encode':>7} {'glue':>7} | "
          f"{'floor':>6} | {'stalkd/floor':>12} {'glue/floor':>10}")
    for run in runs:
        for cell, v in run["cells"].items():
            print(f"{run['implementation']:7} {cell:7} | {v['stalkd']:7.2f} {v['parser']:7.2f} "
                  f"{v['engine']:7.2f} {v['encode']:7.2f} {v['glue']:7.2f} | {v['floor']:6.2f} | "
                  f"{v['stalkd'] / v['floor']:11.1f}x {v['glue'] / v['floor']:9.1f}x")
    c, p = runs
    if c["implementation"] == "c":
        for cell in c["cells"]:
            print(f"C/python total for {cell}: {p['cells'][cell]['stalkd'] / c['cells'][cell]['stalkd']:.2f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
