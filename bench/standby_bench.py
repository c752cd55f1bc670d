"""Hot standby cost, same machine, same run: a primary alone vs with 1 asynchronous standby vs
with 1 synchronous standby (``--sync-standbys 1``), all ``always`` (fsync before every reply).

Cells: durable put and reserve+delete (100-byte bodies), 16 connections, pipeline depth 1 and
64, through ``server_bench``'s load generator; each cell runs BENCH_ROUNDS times with the three
setups alternating and medians are printed, with each setup's ratio to the primary alone (the
target: 1 sync standby >= 0.5x of no standby, pipelined). Also: the largest standby lag the
primary reported (``stats``: ``standby-lag``, records) while the cells ran, and the time from
SIGUSR2 (promotion) to the first put the standby accepts.

Run: ``.venv/bin/python bench/standby_bench.py`` (env as server_bench: BENCH_SECONDS,
BENCH_ROUNDS, GEN_PROCS). Servers listen on port 0 and the port is read from /proc.
``--peer-src DIR`` (or ``BENCH_BASELINE_SRC=DIR``) adds two setups, ``base-async`` and
``base``: an asynchronous and a synchronous pair running the stalkd package found in ``DIR``
(the ``src/`` of an earlier checkout, e.g. from ``git archive``), so a change is measured
against what it replaces in the same run (columns ``async/base``, ``sync/base``). The pairs of
this checkout authenticate their standby (``--replication-secret``); a peer of a build without
that flag runs without it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import server_bench as sb  # noqa: E402  (bench/server_bench.py: generator and cells)

import stalkd  # noqa: E402
from stalkd.client import errors  # noqa: E402
from support import wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)

BASELINE = os.environ.get("BENCH_BASELINE_SRC")
SETUPS: tuple[str, ...] = ("alone", "async", "sync")
CELLS = [("put", 1), ("put", 64), ("rd", 1), ("rd", 64)]
CONNS = 16


class Pair:
    """A primary and, unless ``alone``, its standby."""

    def __init__(self, setup: str) -> None:
        self.setup = setup
        self.dirs = [tempfile.mkdtemp(prefix=f"standby-bench-{setup}-", dir="/var/tmp")]
        flags = ["--sync-standbys", "1"] if setup in ("sync", "base") else []
        peer = setup.startswith("base")
        self.env = None if not peer else {**os.environ, "PYTHONPATH": os.path.abspath(BASELINE or "")}
        secret: list[str] = []
        if not peer:  # this checkout's standbys prove a secret (a peer build may not know the flag)
            self.dirs.append(tempfile.mkdtemp(prefix="standby-bench-secret-", dir="/var/tmp"))
            path = os.path.join(self.dirs[-1], "replication.secret")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                f.write(os.urandom(24).hex())
            secret = ["--replication-secret", path]
        self.primary = self._start(self.dirs[0], [*flags, *secret])
        self.standby: sb.Server | None = None
        if setup != "alone":
            self.dirs.append(tempfile.mkdtemp(prefix="standby-bench-s-", dir="/var/tmp"))
            self.standby = self._start(self.dirs[-1], ["--standby-of", f"127.0.0.1:{self.primary.port}", *secret])
            self.wait_following()

    def _start(self, d: str, flags: list[str]) -> sb.Server:
        args = [*sb.STALKD, "-l", "127.0.0.1", "-p", "0", "--log-level", "warning", "--dir", d, *flags]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        port = wait_for_listener(proc, 30, "stalkd")
        return sb.Server("stalkd", proc, port, None, "always")

    def stats(self, srv: sb.Server) -> dict[str, object]:
        with stalkd.Client(f"127.0.0.1:{srv.port}") as c:
            return dict(c.stats())

    def wait_following(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.stats(self.primary).get("standbys") == 1:
                    return
            except (OSError, errors.ClientConnectionError):
                pass
            time.sleep(0.05)
        raise RuntimeError("the standby never connected")

    def stop(self) -> None:
        for srv in (self.standby, self.primary):
            if srv is not None:
                srv.stop()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)


def _lag_sampler(pair: Pair, stop: threading.Event, out: list[int]) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError, errors.ClientConnectionError):
            out.append(int(pair.stats(pair.primary).get("standby-lag", 0)))  # type: ignore[call-overload]
        stop.wait(0.05)


def promote_to_put(pair: Pair) -> float:
    """Seconds from SIGUSR2 to the standby's first INSERTED (the primary is killed first)."""
    assert pair.standby is not None
    pair.primary.proc.kill()
    pair.primary.proc.wait()
    port = pair.standby.port
    with socket.create_connection(("127.0.0.1", port)) as s:
        t0 = time.perf_counter()
        pair.standby.proc.send_signal(signal.SIGUSR2)
        while True:
            s.sendall(b"put 0 0 60 1\r\nx\r\n")
            reply = s.recv(100)
            if reply.startswith(b"INSERTED"):
                return time.perf_counter() - t0


def main() -> int:
    global BASELINE, SETUPS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-src", metavar="DIR", default=BASELINE,
                    help="the src/ of an earlier checkout: also run its async and sync pairs")
    ap.add_argument("--ha", action="store_true", help="automatic failover instead (bench/ha_bench.py): "
                    "the lease's cost and kill -9 -> first put on the new primary")
    opts = ap.parse_args()
    if opts.ha:
        import ha_bench

        return ha_bench.main()
    BASELINE = opts.peer_src
    if BASELINE:
        SETUPS = (*SETUPS, "base-async", "base")
    print(f"# standby_bench: {CONNS} connections, {sb.SECONDS:.1f} s per cell, {sb.ROUNDS} rounds, "
          f"{sb.GEN_PROCS} generator processes, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    pairs = {s: Pair(s) for s in SETUPS}
    lags: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_lag_sampler, args=(pairs["async"], stop, lags), daemon=True)
    ratios: dict[str, list[float]] = {"async": [], "sync": []}
    if BASELINE:
        print(f"# base-async, base: an asynchronous and a synchronous pair running {BASELINE}")
    try:
        sampler.start()
        print(f"{'work':4} {'depth':>5} | {'alone/s':>9} | {'async/s':>9} {'ratio':>6} | {'sync/s':>9} {'ratio':>6}"
              + (f" | {'b-async/s':>9} {'async/base':>10} | {'base/s':>9} {'sync/base':>9}" if BASELINE else ""))
        for work, depth in CELLS:
            runs: dict[str, list[tuple[float, float, float]]] = {s: [] for s in SETUPS}
            for r in range(sb.ROUNDS):
                k = r % len(SETUPS)
                order = SETUPS[k:] + SETUPS[:k]  # rotate who goes first
                for setup in order:
                    runs[setup].append(sb.run_cell(pairs[setup].primary, work, 100, CONNS, depth))
            med = {s: sb._median(runs[s])[0] for s in SETUPS}
            ra, rs = med["async"] / med["alone"], med["sync"] / med["alone"]
            ratios["async"].append(ra)
            ratios["sync"].append(rs)
            base = (f" | {med['base-async']:9.0f} {med['async'] / med['base-async']:9.2f}x"
                    f" | {med['base']:9.0f} {med['sync'] / med['base']:8.2f}x") if BASELINE else ""
            print(f"{work:4} {depth:5} | {med['alone']:9.0f} | {med['async']:9.0f} {ra:5.2f}x | "
                  f"{med['sync']:9.0f} {rs:5.2f}x{base}", flush=True)
        stop.set()
        sampler.join()
        print(f"# async standby lag while loaded: max {max(lags, default=0)} records, "
              f"median {statistics.median(lags) if lags else 0:.0f} ({len(lags)} samples)")
        for setup in ("async", "sync"):
            print(f"# {setup}: promote (SIGUSR2) -> first INSERTED: {1000 * promote_to_put(pairs[setup]):.0f} ms")
        for setup, rs in ratios.items():
            print(f"# {setup}/alone geometric mean {statistics.geometric_mean(rs):.2f}x, min {min(rs):.2f}x")
    finally:
        stop.set()
        for p in pairs.values():
            p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
