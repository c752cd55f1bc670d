"""A damaged data directory (issue 11 item 1), end to end through the WAL and the real
``stalkd log`` command: 5,000 live jobs, 64 KiB segments, damage written into the real files."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stalkd.log import LogCorruptError
from stalkd.persist.compaction import WalError
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Put

SEG = 65536
T = 1_700_000_000.0


def body(i: int) -> bytes:
    return b"job-%05d " % i + b"b" * 60


def make(d: Path, n: int = 5000, snapshot_at: int | None = None) -> int:
    """A data dir with ``n`` live jobs (more until the active segment holds > 24 KiB); returns
    the number of jobs put. Closed as a kill -9 leaves it (no shutdown work)."""
    wal = Wal.open(d, durability="always", segment_size=SEG)
    eng, _ = wal.recover(now=T)
    eng.connect(1, T)
    i = 0
    while i < n or wal.log.position_of_end()[1] < 24_000:
        wal.write(eng.apply(1, Put(0, 0, 60, body(i)), T).records)
        i += 1
        if snapshot_at == i:
            wal.snapshot(eng)
    wal.sync()
    wal.abandon()
    return i


def active(d: Path) -> Path:
    return Path(sorted(glob.glob(f"{d}/wal/seg-*.log"))[-1])


def jobs(d: Path, repair: bool = False) -> list[bytes]:
    with Wal.open(d, durability="always", segment_size=SEG, repair=repair) as wal:
        eng, _ = wal.recover(now=T)
        return [eng.jobs[k].body for k in sorted(eng.jobs)]


def stalkd_log(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stalkd.cli", "log", *args], capture_output=True, text=True, timeout=120)


def test_flipped_bytes_in_the_active_segment_refused_then_repaired_listing_job_ids(tmp_path: Path) -> None:
    n = make(tmp_path)
    seg = active(tmp_path)
    # Given 8 bytes flipped at byte 20000 of the active segment
    with open(seg, "r+b") as f:
        f.seek(20000)
        old = f.read(8)
        f.seek(20000)
        f.write(bytes(b ^ 0xFF for b in old))
    # Then inspect --verify (data dir, -b, or the log dir) says so and exits 1
    for args in ([str(tmp_path)], ["-b", str(tmp_path)], [str(tmp_path / "wal")]):
        r = stalkd_log("inspect", "--verify", *args)
        assert r.returncode == 1, r.stdout
        assert f"CORRUPT {seg}" in r.stdout and "valid frames follow it" in r.stdout
        assert "stalkd log repair" in r.stdout
    # And the WAL refuses to open, naming file, byte, offset, frames following and the command
    with pytest.raises(LogCorruptError) as exc:
        Wal.open(tmp_path, segment_size=SEG)
    assert exc.value.path == str(seg) and exc.value.position <= 20000
    assert "stalkd log repair" in str(exc.value) and "valid frames follow it" in str(exc.value)
    lost_from = exc.value.offset
    assert lost_from is not None
    # When repaired with the command the message names
    r = stalkd_log("repair", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "records could still be read from the dropped bytes" in r.stdout
    # job ids are offsets + 1 here (one put per record, ids from 1); the damaged one is not readable
    listed = [line.split(":")[0].strip() for line in r.stdout.splitlines() if line.strip().startswith("job ")]
    assert listed == [f"job {k + 1}" for k in range(lost_from + 1, n)]
    (q,) = glob.glob(f"{tmp_path}/wal/dropped/*")
    assert os.stat(q).st_mode & 0o777 == 0o600
    # Then the jobs before the damage are all there, and the directory is clean
    assert jobs(tmp_path) == [body(i) for i in range(lost_from)]
    assert stalkd_log("inspect", "--verify", str(tmp_path)).returncode == 0


@pytest.mark.parametrize("damage", ["remove", "truncate"])
def test_a_removed_or_truncated_active_segment_is_refused(tmp_path: Path, damage: str) -> None:
    make(tmp_path)
    seg = active(tmp_path)
    if damage == "remove":
        seg.unlink()
    else:
        os.truncate(seg, 16 * 1024)
    r = stalkd_log("inspect", "--verify", "-b", str(tmp_path))
    assert r.returncode == 1 and "CORRUPT" in r.stdout
    with pytest.raises(LogCorruptError, match="stalkd log repair"):
        Wal.open(tmp_path, segment_size=SEG)
    assert stalkd_log("repair", str(tmp_path)).returncode == 0
    assert jobs(tmp_path)  # opens again
    assert stalkd_log("inspect", "--verify", str(tmp_path)).returncode == 0


def test_a_log_shorter_than_the_snapshot_says_is_refused_then_continued_at_the_snapshot(tmp_path: Path) -> None:
    # Given a WAL restored from an older copy while the snapshot is newer
    make(tmp_path, n=200)
    shutil.copytree(tmp_path / "wal", tmp_path / "old-wal")
    n = len(jobs(tmp_path))
    with Wal.open(tmp_path, segment_size=SEG) as wal:
        eng, _ = wal.recover(now=T)
        eng.connect(1, T)
        for i in range(300):
            wal.write(eng.apply(1, Put(0, 0, 60, b"later %d" % i), T).records)
        wal.snapshot(eng)
        wal.sync()
        total, reached = len(eng.jobs), wal.log.next_offset
    shutil.rmtree(tmp_path / "wal")
    (tmp_path / "old-wal").rename(tmp_path / "wal")
    # Then inspect reports it and the WAL refuses (old code started, and later puts were lost)
    r = stalkd_log("inspect", str(tmp_path))
    assert r.returncode == 1 and "was taken when it had reached offset" in r.stdout
    with pytest.raises(WalError, match="stalkd log repair"):
        jobs(tmp_path)
    # When repaired, the snapshot's jobs come back and the log begins again at the snapshot's
    # offset (the old copy's segments kept in dropped/): no offset is given twice
    r = stalkd_log("repair", str(tmp_path))
    assert r.returncode == 0 and f"begins again at offset {reached}" in r.stdout, r.stdout + r.stderr
    assert glob.glob(f"{tmp_path}/wal/dropped/seg-*.log")
    assert len(jobs(tmp_path)) == total > n
    # and records written from now on are replayed after a crash, from that offset on
    wal = Wal.open(tmp_path, segment_size=SEG)
    eng, _ = wal.recover(now=T)
    assert wal.log.next_offset == reached
    eng.connect(1, T)
    wal.write(eng.apply(1, Put(0, 0, 60, b"after repair"), T).records)
    wal.sync()
    wal.abandon()
    assert jobs(tmp_path)[-1] == b"after repair" and len(jobs(tmp_path)) == total + 1


def test_inspect_verify_reads_the_snapshots(tmp_path: Path) -> None:
    make(tmp_path, n=300, snapshot_at=250)
    (snap,) = glob.glob(f"{tmp_path}/snapshots/*.snap")
    assert stalkd_log("inspect", "--verify", str(tmp_path)).returncode == 0
    with open(snap, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    r = stalkd_log("inspect", "--verify", "-b", str(tmp_path))
    assert r.returncode == 1 and f"CORRUPT {snap}" in r.stdout


def test_a_repair_does_not_list_records_the_snapshot_already_holds(tmp_path: Path) -> None:
    # Given a snapshot taken after 4,000 puts, then damage early in the segment holding its start
    n = make(tmp_path, n=5000, snapshot_at=4000)
    segs = sorted(glob.glob(f"{tmp_path}/wal/seg-*.log"))
    seg = [s for s in segs if int(Path(s).name[4:24]) < 4000][-1]
    with open(seg, "r+b") as f:
        f.seek(2000)
        f.write(b"\xff" * 8)
    # Then inspect --verify reports the damage and no "torn tail ... not damage" beside it
    r = stalkd_log("inspect", "--verify", str(tmp_path))
    assert r.returncode == 1 and "CORRUPT" in r.stdout
    assert "torn tail" not in r.stdout, r.stdout
    # When repaired
    r = stalkd_log("repair", str(tmp_path))
    assert r.returncode == 0, r.stderr
    # Then the records before the snapshot's start are counted as recovered with it, and only
    # the jobs whose puts came after it are listed as readable in the dropped bytes
    assert "precede the snapshot's start (offset 4000)" in r.stdout, r.stdout
    listed = [int(line.split(":")[0].split()[1]) for line in r.stdout.splitlines()
              if line.strip().startswith("job ")]
    assert listed == list(range(4001, 5001))  # the first 1,000 lines
    assert f"and {n - 5000} more" in r.stdout
    assert len(jobs(tmp_path)) == 4000
