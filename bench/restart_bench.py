"""Restart with many live jobs: what recovery reads after a run of puts nobody took (issue 34).

One run of ``--jobs`` puts (100-byte bodies, the server's maintenance after every 1,000) is made
three ways, and each data directory is recovered ``--repeat`` times in a fresh process, the three
alternating (medians printed):

* ``wal only``: snapshots never due while every job is live (the trigger before: WAL since the
  last snapshot >= the live data, which puts alone never reach), so every put is replayed;
* ``trigger``: the snapshot trigger as it is (``compaction.snapshot_due``: WAL since the last
  snapshot >= a share of the live data): the jobs come back mostly from snapshots, in bulk, plus a tail;
* ``snapshot``: the same with a final snapshot (a clean stop), the floor of what recovery costs.

    .venv/bin/python bench/restart_bench.py [--jobs 1000000] [--repeat 5]

``--first-reply`` measures what a client sees instead: a real ``stalkd serve -b DIR`` from exec to
its first reply (``list-tube-used``), for each of ``--sizes`` live jobs, after a clean stop
(``snapshot``), after a kill (``trigger``: the latest snapshot plus the WAL since) and after a kill
at the worst moment (``worst``: more puts until the next snapshot is due, the longest tail the
trigger allows), this tree against ``--peer-src`` (another tree's ``src``, say old main) in the
same run. Each tree writes its own data directories, since an older tree may not read this one's
snapshots; starts alternate. It also prints what the trigger costs in writing: snapshot bytes
written, and jobs copied into snapshots, per job put.

    .venv/bin/python bench/restart_bench.py --first-reply --sizes 200000,1000000 \
        --peer-src /work/peer-main/src
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Put

T0 = 1_700_000_000.0
T0_US = int(T0 * 1_000_000)
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from support import listening_ports  # noqa: E402  (tests/support.py: port 0 from /proc)


def build(directory: str, n: int, snapshots: bool, final: bool, worst: bool = False) -> tuple[int, int, int]:
    """``n`` puts into a new data directory (a clean stop after them if ``final``; with ``worst``,
    more puts until a snapshot is due, then the kill: the longest tail the trigger lets a kill
    leave). Returns (snapshots written, their bytes, jobs copied into them)."""
    wal = Wal.open(directory, durability="never", background=False,
                   compact_min_bytes=None if snapshots else 1 << 62)  # fmt: skip
    e, _ = wal.recover(T0)
    e.connect(1, T0)
    body = b"x" * 100
    written: dict[str, int] = {}  # snapshot file -> bytes (each is deleted once a newer one is in)

    def settle() -> None:
        while wal.maintain(e, T0):
            pass
        for name in os.listdir(wal.snap_dir):
            if name.endswith(".snap") and name not in written:
                written[name] = os.path.getsize(os.path.join(wal.snap_dir, name))

    for i in range(n):
        wal.write(e.apply(1, Put(0, 0, 60, body), T0).records)
        if i % 1000 == 999:
            settle()
    settle()
    while worst and not wal.compaction_due(e):
        wal.write(e.apply(1, Put(0, 0, 60, body), T0).records)
    if final:
        wal.snapshot(e)
        settle()
    copied = wal.records_migrated
    wal.abandon()
    return len(written), sum(written.values()), copied


def child(directory: str) -> None:
    t = time.perf_counter()
    wal = Wal.open(directory, durability="never")
    _, info = wal.recover(T0 + 1)
    print(time.perf_counter() - t, info.jobs, info.snapshot_jobs, info.records_replayed)
    wal.abandon()


def timed(directory: str) -> tuple[float, int, int, int]:
    out = subprocess.run([sys.executable, __file__, "--child", directory], capture_output=True, text=True,
                         check=True, timeout=600).stdout.split()  # fmt: skip
    return float(out[0]), int(out[1]), int(out[2]), int(out[3])


def _env(src: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": src}


def first_reply(directory: str, src: str) -> tuple[float, float]:
    """Seconds from exec of ``stalkd serve -b directory`` (the tree ``src``) to its first reply,
    and the CPU seconds the server used by then (it is killed at once and its rusage read: on a
    loaded machine the wall time swells with the run queue, the CPU time much less)."""
    args = [sys.executable, "-m", "stalkd.node.cli", "-l", "127.0.0.1", "-p", "0", "-b", directory,
            "--log-level", "warning"]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(args, env=_env(src), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not (ports := listening_ports(proc.pid)):
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                raise RuntimeError(f"stalkd ({src}) did not listen (exit status {proc.poll()})")
            time.sleep(0.0005)
        with socket.create_connection(("127.0.0.1", ports[0]), timeout=120) as s:
            s.sendall(b"list-tube-used\r\n")
            if not s.recv(100).startswith(b"USING"):
                raise RuntimeError(f"stalkd ({src}) did not answer list-tube-used")
        wall = time.monotonic() - t0
        proc.kill()  # a kill -9, as a crash: the data directory stays as it was for the next start
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        return wall, usage.ru_utime + usage.ru_stime
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()


def floor(n: int) -> tuple[float, float]:
    """Seconds to build what any loader that makes one Python object per job must build for ``n``
    jobs of 100 bytes (a ``Job``, its body, its id and created time, its entry in the id map and
    its heap key), the collector off as in recovery; no file read, no check."""
    import gc
    from itertools import repeat

    from stalkd.engine.model import JobState
    from stalkd.engine.objects import Job, Tube

    blob = b"x" * (100 * n)
    gc.disable()
    t, c = time.perf_counter(), time.process_time()
    ids = list(range(1 << 32, (1 << 32) + n))
    bodies = [blob[i : i + 100] for i in range(0, 100 * n, 100)]
    jobs = list(map(Job, ids, repeat(Tube("t", 1), n), repeat(0, n), repeat(0, n), repeat(60, n), bodies,
                    repeat(JobState.READY, n), range(T0_US, T0_US + n)))  # fmt: skip
    by_id = dict(zip(ids, jobs, strict=True))
    keys = [(1 << 64) | i for i in ids]  # heap.pack(pri 1, id)
    t, c = time.perf_counter() - t, time.process_time() - c
    del jobs, by_id, keys, bodies
    gc.enable()
    return t, c


KINDS = {"snapshot": "--final", "trigger": "--no-final", "worst": "--worst"}


def first_reply_table(sizes: list[int], trees: dict[str, str], repeat: int) -> None:
    root = tempfile.mkdtemp(prefix="restart-bench-", dir=os.environ.get("BENCH_DATA_DIR", "/var/tmp"))
    try:
        dirs: dict[tuple[int, str, str], str] = {}
        amp: dict[tuple[int, str, str], tuple[int, int, int, float]] = {}
        for n in sizes:
            for kind, flag in KINDS.items():
                for tree, src in trees.items():
                    d = dirs[n, kind, tree] = os.path.join(root, f"{tree}-{kind}-{n}")
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    made = subprocess.run([sys.executable, __file__, "--build", d, "--jobs", str(n), flag],
                                          env=_env(src), check=True, timeout=1800, capture_output=True,
                                          text=True).stdout  # fmt: skip
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    spent = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                    count, size, copied = map(int, made.split())
                    amp[n, kind, tree] = count, size, copied, spent
        # What each data directory asks recovery to read (read by this tree: the formats are alike).
        held = {key: timed(d)[1:] for key, d in dirs.items()}
        runs: dict[tuple[int, str, str], list[tuple[float, float]]] = {key: [] for key in dirs}
        for r in range(repeat):
            for n in sizes:
                for kind in KINDS:
                    order = list(trees) if r % 2 == 0 else list(trees)[::-1]
                    for tree in order:
                        runs[n, kind, tree].append(first_reply(dirs[n, kind, tree], trees[tree]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    names = list(trees)
    print(f"restart to first reply: exec of stalkd serve -b DIR -> list-tube-used answered, wall and the "
          f"server's CPU by then (medians of {repeat}); worst: killed once more puts made a snapshot due")
    print(f"{'live jobs':>10} {'after':9} | " + " | ".join(f"{t + ' wall, CPU':>24}" for t in names)
          + (" | before/after (CPU)" if len(names) == 2 else "") + " | each recovers: jobs = from the snapshot + WAL records")  # fmt: skip
    for n in sizes:
        for kind in KINDS:
            wall = [statistics.median(w for w, _ in runs[n, kind, t]) for t in names]
            cpu = [statistics.median(c for _, c in runs[n, kind, t]) for t in names]
            print(f"{n:>10,} {kind:9} | "
                  + " | ".join(f"{w * 1000:11.0f} ms, {c * 1000:6.0f} ms" for w, c in zip(wall, cpu, strict=True))
                  + (f" | {wall[0] / wall[1]:5.2f}x ({cpu[0] / cpu[1]:.2f}x)" if len(names) == 2 else "")
                  + " | " + ", ".join("{:,} = {:,} + {:,}".format(*held[n, kind, t]) for t in names))  # fmt: skip
    print("write amplification of the puts before the kill (trigger): snapshots written, snapshot bytes and "
          "jobs copied per job put (100-byte bodies), and the CPU of the whole run (puts and snapshots, in one process)")
    for n in sizes:
        for t in names:
            count, size, copied, spent = amp[n, "trigger", t]
            print(f"{n:>10,} {t:>14} | {count:3} snapshots | {size / n:6.0f} B per job put | "
                  f"{copied / n:5.2f} copies per job put | {spent * 1e6 / n:5.1f} us CPU per job put")
    print("floor: the objects one Python object per job needs (Job, body, ints, id map, heap key), "
          "built in a fresh process")
    for n in sizes:
        made = subprocess.run([sys.executable, __file__, "--floor", str(n)], env=_env(SRC), capture_output=True,
                              text=True, check=True, timeout=600).stdout  # fmt: skip
        fw, fc = map(float, made.split())
        print(f"{n:>10,} jobs: {fw * 1000:8.0f} ms, CPU {fc * 1000:6.0f} ms")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=200_000, help="live jobs (default 200,000; the issue's target is 1M)")
    p.add_argument("--repeat", type=int, default=3, help="recoveries timed per data directory (default 3)")
    p.add_argument("--first-reply", action="store_true",
                   help="time a real server from exec to its first reply instead (see --sizes, --peer-src)")
    p.add_argument("--sizes", default="200000,1000000", help="with --first-reply: live jobs, comma-separated")
    p.add_argument("--peer-src", help="with --first-reply: another tree's src directory, measured in the same run")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--floor", type=int, help=argparse.SUPPRESS)
    p.add_argument("--build", help=argparse.SUPPRESS)
    p.add_argument("--final", action=argparse.BooleanOptionalAction, help=argparse.SUPPRESS)
    p.add_argument("--worst", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child)
        return 0
    if a.floor:
        print(*floor(a.floor))
        return 0
    if a.build:  # run under the PYTHONPATH of the tree whose files it writes
        print(*build(a.build, a.jobs, True, bool(a.final), a.worst))
        return 0
    if a.first_reply:
        trees = ({"before (peer)": a.peer_src} if a.peer_src else {}) | {"after (this)": SRC}
        first_reply_table([int(x) for x in a.sizes.split(",")], trees, a.repeat)
        return 0
    root = tempfile.mkdtemp(prefix="restart-bench-", dir=os.environ.get("BENCH_DATA_DIR", "/var/tmp"))
    kinds = {"wal only": (False, False), "trigger": (True, False), "snapshot": (True, True)}
    try:
        for name, (snaps, final) in kinds.items():
            build(os.path.join(root, name.replace(" ", "-")), a.jobs, snaps, final)
        runs: dict[str, list[tuple[float, int, int, int]]] = {k: [] for k in kinds}
        for _ in range(a.repeat):
            for name in kinds:
                runs[name].append(timed(os.path.join(root, name.replace(" ", "-"))))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(r[0] for r in runs["wal only"])
    print(f"restart with {a.jobs:,} live jobs (medians of {a.repeat}, each in a fresh process)")
    for name, rs in runs.items():
        secs = statistics.median(r[0] for r in rs)
        _, jobs, from_snap, replayed = rs[0]
        print(f"  {name:9s} {secs:6.2f} s  ({from_snap:,} jobs from the snapshot + {replayed:,} WAL records; "
              f"{jobs:,} jobs)  {base / secs:.2f}x wal only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
