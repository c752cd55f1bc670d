"""SIGKILL crash test: a child appends and is killed at random moments; after each kill, every
append that returned is in the log once, in order, and nothing else is. Each cycle picks the
durability policy at random: all three promise to survive kill -9 (only ``always`` also
promises power loss, which a test cannot cut). A 4 MiB segment is larger than the stretch
``always`` zeroes ahead of the data (active.ZERO_AHEAD), so kills also land mid-stretch.

STALKD_CRASH_CYCLES sets the number of kills (default 50; `make crash-campaign` runs 1000).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stalkd.log import LogReader

CHILD = Path(__file__).with_name("crash_child.py")
CYCLES = int(os.environ.get("STALKD_CRASH_CYCLES", "50"))


def check(path: Path, acked: int) -> int:
    """All frames are 0..n-1 in order, each once, n >= acked; returns n."""
    n = 0
    with LogReader(path) as reader:
        for f in reader.read(0):
            seq = int(bytes(f.payload).split(b":", 1)[0])
            assert f.offset == n and seq == n, f"frame at offset {f.offset} carries {seq}, expected {n}"
            n += 1
    assert n >= acked, f"{acked} appends returned but only {n} records survived"
    return n


@pytest.mark.slow
def test_sigkill_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("STALKD_CRASH_SEED", "20261122")))
    log_dir = tmp_path / "log"
    acked = 0
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for cycle in range(CYCLES):
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(log_dir), str(rng.randrange(2**31)), str(rng.choice((4096, 16384, 4 << 20))),
             rng.choice(("always", "always", "every:2", "never"))],
            stdout=subprocess.PIPE, env=env,
        )
        assert proc.stdout is not None
        kill_after = rng.choice((0, 0, 1, 3, 10, 40, 120))
        seen = 0
        try:
            # Wait for "open" (or kill during start-up/recovery when kill_after is 0 and a coin says so)
            if not (kill_after == 0 and rng.random() < 0.5):
                line = proc.stdout.readline()
                assert line.startswith(b"open "), line
                assert int(line.split()[1]) >= acked
                while seen < kill_after:
                    line = proc.stdout.readline()
                    if not line:
                        break
                    acked = max(acked, int(line) + 1)
                    seen += 1
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            rest = proc.stdout.read()
            proc.wait()
            proc.stdout.close()
        for line in rest.splitlines():
            if line and not line.startswith(b"open"):
                acked = max(acked, int(line) + 1)  # returned before the kill landed
        if log_dir.exists() and any(log_dir.glob("seg-*.log")):
            total = check(log_dir, acked)
            assert total >= acked, f"cycle {cycle}"
    assert acked > CYCLES  # the campaign really appended


GROUP_CHILD = Path(__file__).with_name("crash_group_child.py")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["random", "gappy"])
def test_sigkill_consumer_never_loses_or_redelivers_acked(tmp_path: Path, mode: str) -> None:
    """A consumer (group durability ``always``) is SIGKILLed at random moments: afterwards no
    record whose ack returned is delivered again, and every other record still is (only the
    offsets of an ack cut short by the kill may be in either state). ``gappy`` leaves every
    other record unacked, so the cursor outgrows its 4 KiB slots."""
    from stalkd.log import Log

    rng = random.Random(int(os.environ.get("STALKD_CRASH_SEED", "20261122")) + 1)
    log_dir = tmp_path / "log"
    with Log.open(log_dir, segment_size=4096, durability="always") as log:
        log.append_many([b"r"] * 300)
    acked: set[int] = set()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for cycle in range(max(20, CYCLES // 2)):
        proc = subprocess.Popen([sys.executable, str(GROUP_CHILD), str(log_dir), str(rng.randrange(2**31)), mode],
                                stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        lines: list[bytes] = []
        try:
            assert proc.stdout.readline() == b"open\n"
            for _ in range(rng.choice((0, 1, 5, 20, 60))):
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            lines.extend(proc.stdout.read().splitlines(keepends=True))
            proc.wait()
            proc.stdout.close()
        in_doubt: set[int] = set()
        for line in lines:
            if line.startswith(b"try "):
                in_doubt = {int(x) for x in line.split()[1:]}
            elif line == b"ok\n":
                acked |= in_doubt
                in_doubt = set()
        with Log.open(log_dir, segment_size=4096, durability="never") as log:
            g = log.group("g")
            delivered: set[int] = set()
            while batch := g.poll(1000):
                delivered |= {m.offset for m in batch}
            assert not delivered & acked, f"cycle {cycle}: acked records redelivered: {sorted(delivered & acked)[:10]}"
            missing = set(range(log.next_offset)) - delivered - acked
            assert missing <= in_doubt, f"cycle {cycle}: records lost: {sorted(missing - in_doubt)[:10]}"
            acked |= missing  # an interrupted ack that did land
    assert acked, "the consumer never acked anything"
    if mode == "gappy":
        from stalkd.log.cursor import MAX_RANGES, read_cursor

        state = read_cursor(str(log_dir / "groups" / "g.cur"))
        assert state is not None and len(state.acked) > MAX_RANGES, "the campaign never outgrew a 4 KiB slot"
