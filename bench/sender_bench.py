"""The primary's own work for one standby, counted apart from the machine's load: the loop
thread's CPU time (user + system, the loopback send included) to read its log back, send the
frames and read the acknowledgements, per job and per message.

A real ``Log`` and ``Replicas``/``Sender`` on a uvloop loop, a real loopback TCP stream to
``standby_standin.py`` in its own process (it checks every message and acknowledges each read
at once; its CPU is not counted). Records are written in batches of B (one batch = one group
commit = one message, as under ``--sync-standbys``; an asynchronous standby gets the group
commits of ``ASYNC_SEND_EVERY`` seconds in one message), each batch sent at once, until the
stand-in acknowledged the whole log; the same writes without a standby give the baseline. The
figure is the difference, the best of the rounds (the least disturbed): CPU time counts only
what this thread ran, so the load of other processes moves it far less than wall time, though
a busy machine's cache misses still add to it.

Run: ``.venv/bin/python bench/sender_bench.py [--batches 1,16,256] [--records N] [--rounds R]``.
``bench/standby_bench.py`` gives the primary's CPU per job in a running server for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time

import uvloop

from stalkd.engine.model import Op, Record
from stalkd.persist.wal import Wal
from stalkd.replication.role import Role
from stalkd.replication.sender import Replicas, Sender

HERE = os.path.dirname(os.path.abspath(__file__))


def _batches(n: int, size: int) -> list[list[Record]]:
    return [[Record(Op.PUT, j + 1, 5_000_000, j + 1, "t", 0, 0, 60, 0, b"x" * 100) for j in range(i, min(n, i + size))]
            for i in range(0, n, size)]  # fmt: skip


async def _run(work: str, n: int, size: int, with_standby: bool) -> float:
    """Loop-thread CPU seconds to write ``n`` records in batches of ``size`` (and stream them)."""
    loop = asyncio.get_running_loop()
    batches = _batches(n, size)
    with tempfile.TemporaryDirectory(dir=work) as d, Wal.open(d, durability="never") as wal:
        reps = Replicas(wal.log, wal.snap_dir, Role(None), 0, lambda: None)
        stand_in = None
        if with_standby:
            server = await loop.create_server(lambda: Sender(reps, True, None), "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            secret = os.path.join(d, "secret")
            with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(os.urandom(24).hex())
            stand_in = subprocess.Popen([sys.executable, os.path.join(HERE, "standby_standin.py"), str(port), secret])
            deadline = time.monotonic() + 30
            while not reps.senders:
                if time.monotonic() > deadline or stand_in.poll() is not None:
                    raise RuntimeError("the stand-in standby never streamed")
                await asyncio.sleep(0.01)
        try:
            t0 = time.thread_time()
            for b in batches:
                wal.write(b)
                for s in reps.senders:
                    s.pump()
                await asyncio.sleep(0)  # acknowledgements are read between group commits
            end = wal.log.next_offset
            while reps.senders and min(s.acked for s in reps.senders) < end:
                await asyncio.sleep(0.0002)
            return time.thread_time() - t0
        finally:
            if stand_in is not None:
                server.close()
                reps.close()
                stand_in.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    stand_in.wait(5)
                if stand_in.poll() is None:
                    stand_in.kill()
                    stand_in.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,16,256", help="records per group commit (comma-separated)")
    ap.add_argument("--records", type=int, default=100_000, help="records per run")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each, alternating; the best is shown")
    ap.add_argument("--dir", default="/var/tmp", help="where the logs are written")
    opts = ap.parse_args()
    n = opts.records
    print(f"# sender_bench: {n} records of 100 B per run, best of {opts.rounds}, load {os.getloadavg()[0]:.1f}")
    print(f"{'batch':>6} | {'alone us/job':>12} | {'with us/job':>11} | {'standby +us/job':>15} {'+us/msg':>8}")
    for size in (int(x) for x in opts.batches.split(",")):
        runs: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(opts.rounds):
            for with_standby in (False, True):
                runs[with_standby].append(uvloop.run(_run(opts.dir, n, size, with_standby)))
        alone, with_ = min(runs[False]), min(runs[True])
        messages = -(-n // size)
        print(f"{size:6d} | {1e6 * alone / n:12.2f} | {1e6 * with_ / n:11.2f} | {1e6 * (with_ - alone) / n:15.2f} "
              f"{1e6 * (with_ - alone) / messages:8.1f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
