"""Engine hot paths: throughput, memory per job, recovery time, disk under churn.

Figures, each printed with its peer or target measured in the same run:
- engine ops/s for put+reserve+delete cycles (pure engine, no I/O), next to Debian's beanstalkd
  doing the same cycles over a pipelined loopback connection (network included: a ceiling for
  what a server built on this engine must approach, not a like-for-like ratio);
- RSS per live 100-byte job at N jobs, stalkd engine vs beanstalkd holding the same N jobs
  (target <= 2x);
- recovery time with N live jobs (snapshot + WAL tail; target < 3 s at 1M);
- disk (WAL + snapshots) after M release-with-delay cycles on 1,000 live jobs
  (target <= 2x live data + 2 segments).

Run: .venv/bin/python bench/engine_bench.py [--jobs 1000000] [--cycles 1000000] [--quick]
Throughput against another tree of stalkd (e.g. one with other compiled code), both sides in
child processes, alternating in the same rounds:
     .venv/bin/python bench/engine_bench.py --only throughput --peer-src /path/to/stalkd/src [--rounds 7]
Recovery alone (about a minute; ``--keep DIR`` builds the WAL once and reuses it on later runs,
``--repeat K`` reports the best and median of K restarts):
     .venv/bin/python bench/engine_bench.py --only recovery [--keep /tmp/stalkd-rec] [--repeat 3]
     [--tail N]  (WAL records after the snapshot; default 1% of --jobs; a WAL about to be
     compacted can hold as many bytes as the live jobs, i.e. a tail as long as --jobs)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from stalkd.engine import Engine
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Delete, Put, Release, Reserve, ReserveJob

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from support import wait_for_listener  # noqa: E402  (tests/support.py: port 0 from /proc)

BODY = b"x" * 100
T0 = 1_700_000_000.0


def rss_kib(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


# --- engine throughput --------------------------------------------------------------------------


def engine_cycles(n: int, records: bool = True) -> tuple[float, float]:
    """(wall, CPU) seconds for n put+reserve+delete cycles (``records=False``: the in-memory
    server's engine, which builds no WAL records)."""
    e = Engine(records=records)
    e.connect(1, T0)
    now = T0
    put, res = Put(0, 0, 120, BODY), Reserve()
    apply = e.apply
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        jid = apply(1, put, now).reply.args[0]  # type: ignore[union-attr]
        apply(1, res, now)
        apply(1, Delete(jid), now)
    return time.perf_counter() - t0, time.process_time() - c0


def _child_cycles(src: str | None, n: int, records: bool) -> float:
    """CPU microseconds per op of ``engine_cycles`` run in a child process, from this tree or
    from the stalkd tree at ``src`` (its modules, compiled or not, first on the path)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-cycles", str(n),
                          "--child-records", "1" if records else "0"],
                         env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
    return float(out.split()[-1])


def throughput_ab(peer: str, ops: int, rounds: int) -> None:
    """This tree's engine against ``peer``'s, put+reserve+delete, alternating in each round."""
    print(f"# engine put+reserve+delete, CPU us per op, {ops:,} cycles per figure, {rounds} rounds "
          f"alternating; peer: stalkd from {peer}; load {os.getloadavg()[0]:.1f}")
    for records in (True, False):
        mine: list[float] = []
        theirs: list[float] = []
        for r in range(rounds):
            order = (None, peer) if r % 2 == 0 else (peer, None)
            for src in order:
                (mine if src is None else theirs).append(_child_cycles(src, ops, records))
        mine.sort()
        theirs.sort()
        m, t = mine[len(mine) // 2], theirs[len(theirs) // 2]
        print(f"records={records!s:5}  stalkd {m:.2f} (min {mine[0]:.2f})  peer {t:.2f} (min {theirs[0]:.2f})  "
              f"speed stalkd/peer median {t / m:.2f}x, min {theirs[0] / mine[0]:.2f}x")


# --- beanstalkd peer ----------------------------------------------------------------------------


def start_beanstalkd() -> tuple[subprocess.Popen[bytes], socket.socket] | None:
    exe = shutil.which("beanstalkd") or ("/usr/bin/beanstalkd" if os.path.exists("/usr/bin/beanstalkd") else None)
    if exe is None:
        return None
    proc = subprocess.Popen([exe, "-l", "127.0.0.1", "-p", "0", "-z", "65535"])
    try:
        return proc, socket.create_connection(("127.0.0.1", wait_for_listener(proc, 10, "beanstalkd")), timeout=30)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _drain_lines(sock: socket.socket, want: int, buf: bytearray) -> bytearray:
    """Read until ``want`` reply lines have arrived; returns the unread rest. Bodies of RESERVED
    replies are skipped by length."""
    got = 0
    while got < want:
        i = buf.find(b"\r\n")
        if i < 0:
            buf += sock.recv(1 << 20)
            continue
        line = bytes(buf[:i])
        if line.startswith(b"RESERVED"):
            n = int(line.split()[2])
            while len(buf) < i + 2 + n + 2:
                buf += sock.recv(1 << 20)
            del buf[: i + 2 + n + 2]
        else:
            del buf[: i + 2]
        got += 1
    return buf


def beanstalkd_puts(sock: socket.socket, n: int, batch: int = 2000) -> None:
    cmd = b"put 0 0 120 100\r\n" + BODY + b"\r\n"
    buf = bytearray()
    for done in range(0, n, batch):
        k = min(batch, n - done)
        sock.sendall(cmd * k)
        buf = _drain_lines(sock, k, buf)


def beanstalkd_cycles(sock: socket.socket, n: int, batch: int = 500) -> float:
    """put+reserve+delete cycles; the delete ids are known because beanstalkd's ids count up."""
    sock.sendall(b"put 0 0 120 100\r\n" + BODY + b"\r\n")
    line = _read_line(sock)
    first = int(line.split()[1]) + 1
    sock.sendall(b"delete %d\r\n" % (first - 1))
    _read_line(sock)
    buf = bytearray()
    t0 = time.perf_counter()
    jid = first
    for done in range(0, n, batch):
        k = min(batch, n - done)
        parts = []
        for i in range(k):
            parts.append(b"put 0 0 120 100\r\n" + BODY + b"\r\nreserve\r\ndelete %d\r\n" % (jid + i))
        jid += k
        sock.sendall(b"".join(parts))
        buf = _drain_lines(sock, 3 * k, buf)
    return time.perf_counter() - t0


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\r\n"):
        data += sock.recv(1)
    return data


# --- memory (child process, so the measurement is not polluted) ---------------------------------


def child_memory(n: int) -> None:
    e = Engine()
    e.connect(1, T0)
    bodies = [bytes([i % 251]) * 100 for i in range(4)]  # distinct objects per job below
    before = rss_kib()
    apply = e.apply
    for i in range(n):
        apply(1, Put(i & 0xFFFF, 0, 120, bodies[i & 3][:99] + b"z"), T0)
    after = rss_kib()
    print(f"{(after - before) * 1024 / n:.1f}")


def engine_bytes_per_job(n: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--child-memory", str(n)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return float(out.stdout.strip())


# --- recovery -----------------------------------------------------------------------------------


def build_wal(directory: str, n: int, tail: int) -> list[float]:
    """N live jobs: a snapshot taken by maintain() steps, then ``tail`` more records in the WAL.
    Returns the maintain() step durations (what the event loop would be held for)."""
    with Wal.open(directory, durability="never", compact_min_bytes=1 << 62) as wal:
        e, _ = wal.recover(T0)
        e.connect(1, T0)
        batch = []
        for i in range(n):
            batch.extend(e.apply(1, Put(i & 0xFF, 0, 120, BODY), T0).records)
            if len(batch) >= 5000:
                wal.write(batch)
                batch = []
        wal.write(batch)
        steps = []
        busy = True
        force = True
        while busy:
            moved = wal.records_migrated
            t0 = time.perf_counter()
            busy = wal.maintain(e, T0, force=force)
            took = time.perf_counter() - t0
            if force or wal.records_migrated != moved:
                steps.append(took)  # a copying step, not a poll of the background thread
            else:
                time.sleep(0.001)  # the loop would serve clients meanwhile
            force = False
        recs = []
        for _ in range(tail):
            recs.extend(e.apply(1, Put(0, 0, 120, BODY), T0).records)
        wal.write(recs)
        wal.sync()
    return sorted(steps)


def child_recover(directory: str) -> None:
    t0, c0 = time.perf_counter(), time.process_time()
    wal = Wal.open(directory, durability="never")
    t_open = time.perf_counter() - t0
    e, info = wal.recover(T0 + 1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{wall:.3f} {cpu:.3f} {t_open:.3f} {info.snapshot_seconds:.3f} {len(e.jobs)} {info.records_replayed}")
    os._exit(0)  # skip freeing a million objects: not part of a restart


def recovery_seconds(directory: str) -> tuple[float, float, float, float, int, int]:
    out = subprocess.run([sys.executable, __file__, "--child-recover", directory],
                         capture_output=True, text=True, check=True)  # fmt: skip
    wall, cpu, t_open, t_snap, jobs, replayed = out.stdout.split()
    return float(wall), float(cpu), float(t_open), float(t_snap), int(jobs), int(replayed)


# --- disk under churn ---------------------------------------------------------------------------


def churn_disk(directory: str, cycles: int, segment_size: int, live_jobs: int = 1000) -> tuple[int, int, int, float]:
    with Wal.open(directory, durability="never", segment_size=segment_size) as wal:
        e, _ = wal.recover(T0)
        e.connect(1, T0)
        now = T0
        for _ in range(live_jobs):
            wal.write(e.apply(1, Put(0, 0, 120, BODY), now).records)
        peak = 0
        t0 = time.perf_counter()
        for c in range(cycles):
            jid = 1 + c % live_jobs
            wal.write(e.apply(1, ReserveJob(jid), now).records)
            wal.write(e.apply(1, Release(jid, 0, 3600), now).records)
            wal.maintain(e, now)
            if c % 10000 == 0:
                peak = max(peak, wal.disk_bytes())
        secs = time.perf_counter() - t0
        wal.snapshot(e)  # let a running background snapshot land before measuring
        final = wal.disk_bytes()
        peak = max(peak, final)
        live = sum(len(j.body) for j in e.jobs.values())
    return final, peak, live, secs


def report_recovery(d: str, n: int, repeat: int) -> None:
    runs = sorted((recovery_seconds(d) for _ in range(max(1, repeat))), key=lambda r: r[0])
    wall, cpu, t_open, t_snap, jobs, replayed = runs[0]
    what = f"best of {len(runs)}, median {runs[len(runs) // 2][0]:.2f} s; " if len(runs) > 1 else ""
    print(f"recovery {jobs:,} live jobs (snapshot + {replayed:,} WAL records): {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU ({what}log open {t_open:.2f} s, snapshot load {t_snap:.2f} s) (target < 3 s; "
          f"load average {os.getloadavg()[0]:.2f})")


def recovery_only(n: int, keep: str | None, repeat: int, tail: int) -> None:
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="stalkd-bench-") as d:
            build_wal(d, n, tail=tail)
            report_recovery(d, n, repeat)
        return
    stamp = os.path.join(keep, "bench-jobs")
    built = ""
    with contextlib.suppress(FileNotFoundError), open(stamp) as f:
        built = f.read()
    if built != f"{n} {tail}":
        shutil.rmtree(keep, ignore_errors=True)
        os.makedirs(keep)
        build_wal(keep, n, tail=tail)
        with open(stamp, "w") as f:
            f.write(f"{n} {tail}")
    report_recovery(keep, n, repeat)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--cycles", type=int, default=1_000_000)
    ap.add_argument("--ops", type=int, default=200_000, help="put+reserve+delete cycles timed")
    ap.add_argument("--segment-size", type=int, default=4 * 2**20)
    ap.add_argument("--quick", action="store_true", help="100k jobs/cycles, 50k ops")
    ap.add_argument("--only", choices=["recovery", "throughput"], help="run one part of the benchmark")
    ap.add_argument("--peer-src", help="with --only throughput: the src/ of another stalkd tree to compare with")
    ap.add_argument("--rounds", type=int, default=7, help="with --peer-src: alternating rounds")
    ap.add_argument("--keep", help="with --only recovery: build the WAL in this directory once, reuse it after")
    ap.add_argument("--repeat", type=int, default=1, help="with --only recovery: restarts timed")
    ap.add_argument("--tail", type=int, help="with --only recovery: WAL records after the snapshot (default jobs/100)")
    ap.add_argument("--child-memory", type=int)
    ap.add_argument("--child-recover")
    ap.add_argument("--child-cycles", type=int)
    ap.add_argument("--child-records", type=int, default=1)
    a = ap.parse_args()
    if a.child_cycles:
        _, cpu = engine_cycles(a.child_cycles, records=bool(a.child_records))
        print(f"{cpu / a.child_cycles / 3 * 1e6:.4f}")
        return None
    if a.child_memory:
        return child_memory(a.child_memory)
    if a.child_recover:
        return child_recover(a.child_recover)
    if a.quick:
        a.jobs, a.cycles, a.ops = 100_000, 100_000, 50_000
    if a.only == "throughput":
        if a.peer_src:
            return throughput_ab(a.peer_src, a.ops, a.rounds)
        a.only = None  # the figures below, throughput first
    if a.only == "recovery":
        return recovery_only(a.jobs, a.keep, a.repeat, a.jobs // 100 if a.tail is None else a.tail)

    secs, cpu = engine_cycles(a.ops)
    eng_rate = a.ops * 3 / secs
    print(f"engine  put+reserve+delete: {eng_rate:,.0f} ops/s ({secs / a.ops / 3 * 1e6:.2f} us/op wall, "
          f"{cpu / a.ops / 3 * 1e6:.2f} us/op CPU)")
    secs_nr, cpu_nr = engine_cycles(a.ops, records=False)
    print(f"engine  same, records=False (in memory): {a.ops * 3 / secs_nr:,.0f} ops/s "
          f"({secs_nr / a.ops / 3 * 1e6:.2f} us/op wall, {cpu_nr / a.ops / 3 * 1e6:.2f} us/op CPU)")
    peer = start_beanstalkd()
    bs_per_job = None
    if peer is None:
        print("beanstalkd not installed: peer figures skipped")
    else:
        proc, sock = peer
        try:
            bsecs = beanstalkd_cycles(sock, a.ops)
            bs_rate = a.ops * 3 / bsecs
            print(f"beanstalkd (loopback, pipelined): {bs_rate:,.0f} ops/s; engine/beanstalkd = {eng_rate / bs_rate:.2f}x")
            before = rss_kib(proc.pid)
            beanstalkd_puts(sock, a.jobs)
            bs_per_job = (rss_kib(proc.pid) - before) * 1024 / a.jobs
        finally:
            sock.close()
            proc.kill()
            proc.wait()
    per_job = engine_bytes_per_job(a.jobs)
    line = f"memory  RSS per live 100-byte job at {a.jobs:,} jobs: stalkd engine {per_job:.0f} B"
    if bs_per_job:
        line += f", beanstalkd {bs_per_job:.0f} B, ratio {per_job / bs_per_job:.2f}x (target <= 2x)"
    print(line)

    with tempfile.TemporaryDirectory(prefix="stalkd-bench-") as d:
        steps = build_wal(d, a.jobs, tail=a.jobs // 100)
        print(f"snapshot of {a.jobs:,} jobs in {len(steps)} maintain() steps: median "
              f"{steps[len(steps) // 2] * 1e3:.1f} ms, p99 {steps[int(len(steps) * 0.99)] * 1e3:.1f} ms, "
              f"max {steps[-1] * 1e3:.1f} ms (fsync/rename/retain run in a background thread)")
        report_recovery(d, a.jobs, 1)
    with tempfile.TemporaryDirectory(prefix="stalkd-bench-") as d:
        final, peak, live, csecs = churn_disk(d, a.cycles, a.segment_size)
        bound = 2 * live + 2 * a.segment_size
        print(f"disk    after {a.cycles:,} release-with-delay cycles on 1,000 jobs "
              f"(segments {a.segment_size >> 20} MiB, {a.cycles / csecs:,.0f} cycles/s): "
              f"final {final / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB; "
              f"2x live + 2 segments = {bound / 2**20:.1f} MiB -> final/bound {final / bound:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
