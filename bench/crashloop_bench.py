"""A crash loop: start ``stalkd serve``, run a steady workload, kill -9, again; the curve of restart
cost and WAL size per cycle (issue 34 item 2).

Each cycle starts the server on the same data directory, times its first reply after exec, puts
``--puts`` jobs of ``--body`` bytes on one pipelined connection and deletes the oldest so that
``--live`` stay live (about 1 MiB of WAL a cycle by default: under the 4 MiB a run had to write
before the snapshot trigger counted it), then kills it with SIGKILL. The next start's log line says
how long recovery took and how many WAL records it replayed; the WAL's segment files are measured
after each kill. ``--peer-src DIR`` runs the same loop on another stalkd tree first (say a checkout
of main: ``git worktree add /tmp/main main``, then ``--peer-src /tmp/main/src``), so before and
after come from one run on one machine.

    .venv/bin/python bench/crashloop_bench.py --cycles 40
    .venv/bin/python bench/crashloop_bench.py --cycles 500 --peer-src /tmp/main/src   # make crashloop

Bound printed with the figures: 2 x live data + 2 segments (the WAL's bound under churn).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from support import wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)

SEGMENT = 4 * 2**20
_RECOVERED = re.compile(r"\+ (\d+) WAL records.* in ([0-9.]+)s")


def first_reply(proc: subprocess.Popen[bytes], t0: float) -> tuple[int, float]:
    """(port, seconds from exec to the first reply)."""
    port = wait_for_listener(proc, 120, "stalkd")
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                s.sendall(b"list-tube-used\r\n")
                if s.recv(64):
                    return port, time.monotonic() - t0
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"stalkd exited with {proc.returncode}") from None
            time.sleep(0.005)


def read_until(s: socket.socket, buf: bytearray, lines: int) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < lines:
        i = buf.find(b"\r\n")
        if i < 0:
            chunk = s.recv(1 << 16)
            if not chunk:
                raise RuntimeError("stalkd closed the connection")
            buf += chunk
            continue
        out.append(bytes(buf[:i]))
        del buf[: i + 2]
    return out


def workload(port: int, live: list[int], puts: int, body: int, keep: int) -> None:
    """``puts`` puts, then deletes of the oldest until ``keep`` are live (pipelined, 100 at a time)."""
    data = b"b" * body
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        buf = bytearray()
        for start in range(0, puts, 100):
            n = min(100, puts - start)
            s.sendall(b"".join(b"put 0 0 60 %d\r\n%s\r\n" % (body, data) for _ in range(n)))
            for line in read_until(s, buf, n):
                if not line.startswith(b"INSERTED "):
                    raise RuntimeError(f"put refused: {line!r}")
                live.append(int(line.split()[1]))
            doomed, live[:] = live[: max(0, len(live) - keep)], live[max(0, len(live) - keep) :]
            if doomed:
                s.sendall(b"".join(b"delete %d\r\n" % j for j in doomed))
                for line in read_until(s, buf, len(doomed)):
                    if line != b"DELETED":
                        raise RuntimeError(f"delete refused: {line!r}")


def wal_bytes(data_dir: str) -> int:
    """Bytes the WAL's segment files take (live ones, not spares or snapshots)."""
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(data_dir, "wal", "seg-*.log")))


def loop(name: str, src: str | None, args: argparse.Namespace) -> list[tuple[int, float, int, float, int]]:
    """The crash loop on one tree: per cycle (cycle, first reply s, records replayed, recovery s,
    WAL bytes after the kill)."""
    data_dir = tempfile.mkdtemp(prefix=f"crashloop-{name}-", dir=os.environ.get("BENCH_DATA_DIR", "/var/tmp"))
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    log_path = os.path.join(data_dir, "server.log")
    live: list[int] = []
    rows = []
    try:
        for cycle in range(args.cycles):
            with open(log_path, "wb") as err:
                t0 = time.monotonic()
                proc = subprocess.Popen([sys.executable, "-m", "stalkd.cli", "serve", "-l", "127.0.0.1", "-p", "0",
                                         "-b", os.path.join(data_dir, "d"), "-F", "--log-level", "info"],
                                        env=env, stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
                try:
                    port, reply_s = first_reply(proc, t0)
                    workload(port, live, args.puts, args.body, args.live)
                finally:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
            with open(log_path, encoding="utf-8", errors="replace") as f:
                m = _RECOVERED.search(f.read())
            replayed, rec_s = (int(m.group(1)), float(m.group(2))) if m else (-1, -1.0)
            rows.append((cycle + 1, reply_s, replayed, rec_s, wal_bytes(os.path.join(data_dir, "d"))))
            if args.progress:  # a long run's curve so far, on stderr
                print(f"{name} {rows[-1][0]} first reply {reply_s * 1e3:.0f} ms, replayed {replayed}, "
                      f"recovery {rec_s * 1e3:.0f} ms, WAL {rows[-1][4] / 2**20:.1f} MiB", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=40, help="kill -9 cycles per tree (default 40; the issue's is 500)")
    p.add_argument("--puts", type=int, default=1000, help="puts per cycle (default 1000)")
    p.add_argument("--body", type=int, default=1000, help="body bytes (default 1000)")
    p.add_argument("--live", type=int, default=500, help="jobs kept live (default 500)")
    p.add_argument("--peer-src", help="another stalkd tree's src/ to run first (before)")
    p.add_argument("--every", type=int, default=0, help="print every Nth cycle (default: about 10 rows)")
    p.add_argument("--progress", action="store_true", help="also print each cycle as it ends, on stderr")
    args = p.parse_args()
    runs = []
    if args.peer_src:
        runs.append(("before", loop("before", args.peer_src, args)))
    runs.append(("after", loop("after", None, args)))
    live_bytes = args.live * (args.body + 100)
    bound = 2 * live_bytes + 2 * SEGMENT
    print(f"crash loop: {args.cycles} cycles of {args.puts} puts x {args.body} B, {args.live} live, then kill -9; "
          f"WAL bound 2 x live + 2 segments = {bound / 2**20:.1f} MiB")
    every = args.every or max(1, args.cycles // 10)
    head = "cycle" + "".join(f" | {n}: first reply ms, replayed, recovery ms, WAL MiB" for n, _ in runs)
    print(head)
    for i in range(args.cycles):
        if (i + 1) % every and i + 1 != args.cycles and i:
            continue
        cells = []
        for _, rows in runs:
            c, reply_s, replayed, rec_s, wal = rows[i]
            cells.append(f"{reply_s * 1e3:7.0f} {replayed:8d} {rec_s * 1e3:7.0f} {wal / 2**20:7.1f}")
        print(f"{i + 1:5d} | " + " | ".join(cells))
    for name, rows in runs:
        worst = max(r[4] for r in rows)
        print(f"{name}: largest WAL {worst / 2**20:.1f} MiB ({worst / bound:.2f}x the bound), most records replayed "
              f"{max(r[2] for r in rows)}, slowest first reply {max(r[1] for r in rows) * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
