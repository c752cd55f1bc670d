"""A full disk that clears on its own (issue 11 item 3), on a real 16 MiB tmpfs this test mounts.

Fill the file system with puts until OUT_OF_MEMORY, delete every job, and keep putting: the
server compacts on its own schedule until the dead WAL is gone, so puts succeed again without
anyone freeing space by hand (before: refused forever, the snapshot retry never ran). A clean
stop takes a snapshot, so a restart does not replay the dead records. Skipped where mounting is
not allowed, like tests/server/test_full_disk.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.proc import start_stalkd
from server.wire import Wire, stats
from support import small_tmpfs

MiB = 1 << 20


@pytest.fixture
def fs16(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path, "16m") as mnt:
        yield mnt


def put(w: Wire, body: bytes) -> bytes:
    return w.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))


def fill(w: Wire, body: bytes) -> list[int]:
    ids = []
    for _ in range(100_000):
        reply = put(w, body)
        if reply == b"OUT_OF_MEMORY\r\n":
            return ids
        assert reply.startswith(b"INSERTED "), reply
        ids.append(int(reply.split()[1]))
    pytest.fail("the disk never filled")


def put_until_inserted(w: Wire, body: bytes, within: float) -> int:
    """Put until INSERTED (the server's own compaction runs about once a second); the id."""
    deadline = time.monotonic() + within
    while True:
        reply = put(w, body)
        if reply.startswith(b"INSERTED "):
            return int(reply.split()[1])
        assert reply == b"OUT_OF_MEMORY\r\n", reply
        if time.monotonic() > deadline:
            pytest.fail(f"puts still refused {within} s after every job was deleted")
        w.cmd(b"stats\r\n")  # a round trip: let the server's loop run its maintenance
        time.sleep(0.05)


def churn(w: Wire, body: bytes, total: int) -> None:
    """Put ``total`` bytes of bodies, each deleted once inserted (puts refused meanwhile retried)."""
    written = 0
    while written < total:
        jid = put_until_inserted(w, body, within=30)
        assert w.cmd(b"delete %d\r\n" % jid) == b"DELETED\r\n"
        written += len(body)


FILLER = """
import os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
for chunk in (1 << 20, 65536, 4096, 1):
    try:
        while True:
            os.write(fd, b"\\1" * chunk)
    except OSError:
        pass
os.close(fd)
print("full", flush=True)
sys.stdin.readline()
os.unlink(path)
print("freed", flush=True)
"""


def hog(path: Path) -> subprocess.Popen[str]:
    """Another process that takes every free byte of the file system until told to free it."""
    p = subprocess.Popen([sys.executable, "-c", FILLER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "full"
    return p


def test_fill_delete_everything_and_puts_succeed_again_on_their_own(fs16: Path) -> None:
    data = fs16 / "data"
    flags = ("-b", str(data), "-s", str(MiB), "-F")
    body = b"f" * 8000
    s = start_stalkd(*flags)
    filler = None
    try:
        with Wire(port=s.port) as w:
            # Given a file system filled by puts, then every job deleted
            ids = fill(w, body)
            assert len(ids) > 1000
            # (to the last byte: no room is left for even a small snapshot file)
            filler = hog(fs16 / "hog")
            for i in ids:
                assert w.cmd(b"delete %d\r\n" % i) == b"DELETED\r\n"
            # When puts go on, more than the file system holds in all (each deleted again)
            churn(w, body, 40 * MiB)
            # Then the dead WAL was dropped along the way: nobody freed anything by hand
            assert int(stats(w)["current-jobs-ready"]) == 0
        s.stop()
        assert s.proc.returncode == 0, s.log_text()
        assert "snapshot at stop" in s.log_text()
    finally:
        s.stop()
        if filler is not None:
            filler.kill()
            filler.wait()
    # And the restart loads the stop's snapshot instead of replaying the dead records
    s2 = start_stalkd(*flags)
    try:
        with Wire(port=s2.port) as w:
            assert put(w, b"after").startswith(b"INSERTED ")
        assert "+ 0 WAL records" in s2.log_text(), s2.log_text()
    finally:
        s2.stop()




def test_live_jobs_larger_than_a_quarter_segment_still_let_the_disk_clear(fs16: Path) -> None:
    """Issue 30: the snapshot reserve was a quarter segment; live jobs larger than it left puts
    refused for ever. It now grows with the live data, so the snapshot that drops the dead WAL fits."""
    data = fs16 / "data"
    body = b"k" * 8000
    keep = 300  # 2.4 MB of live jobs: ten times the old reserve of a 1 MiB segment
    s = start_stalkd("-b", str(data), "-s", str(MiB), "-F")
    filler = None
    try:
        with Wire(port=s.port) as w:
            # Given a file system filled by puts, then every job deleted but the first 300
            ids = fill(w, body)
            assert len(ids) > keep
            filler = hog(fs16 / "hog")
            for i in ids[keep:]:
                assert w.cmd(b"delete %d\r\n" % i) == b"DELETED\r\n"
            # When puts go on, more than the file system holds in all (each deleted again)
            churn(w, body, 24 * MiB)
            # Then they were accepted on their own, and the kept jobs are all there
            assert int(stats(w)["current-jobs-ready"]) == keep
            for i in ids[:keep]:
                assert w.cmd(b"peek %d\r\n" % i).startswith(b"FOUND %d 8000" % i)
    finally:
        s.stop()
        if filler is not None:
            filler.kill()
            filler.wait()


def test_another_process_fills_the_fs_then_frees_it_and_every_acked_job_survives_kill9(fs16: Path) -> None:
    data = fs16 / "data"
    flags = ("-b", str(data), "-s", str(MiB))
    acked: dict[int, bytes] = {}
    s = start_stalkd(*flags)
    filler = None
    try:
        with Wire(port=s.port) as w:
            for i in range(300):
                b = b"before %d " % i + b"x" * 2000
                reply = put(w, b)
                assert reply.startswith(b"INSERTED "), reply
                acked[int(reply.split()[1])] = b
            # Given another process that takes every free byte of the file system
            filler = hog(fs16 / "hog")
            assert filler.stdout is not None and filler.stdin is not None
            # When puts go on, some are refused, none is lost; deletes of existing jobs work
            refused = 0
            for i in range(3000):
                b = b"during %d " % i + b"y" * 2000
                reply = put(w, b)
                if reply == b"OUT_OF_MEMORY\r\n":
                    refused += 1
                    continue
                assert reply.startswith(b"INSERTED "), reply
                acked[int(reply.split()[1])] = b
            assert refused > 0
            for jid in sorted(acked)[:100]:
                assert w.cmd(b"delete %d\r\n" % jid) == b"DELETED\r\n"
                del acked[jid]
            # And once the other process frees its space, puts are accepted again
            filler.stdin.write("go\n")
            filler.stdin.flush()
            assert filler.stdout.readline().strip() == "freed"
            for i in range(200):
                b = b"after %d " % i + b"z" * 2000
                jid = put_until_inserted(w, b, within=30)
                acked[jid] = b
        # Then after a kill -9, every acknowledged job is there, with its body
        s.kill9()
    finally:
        s.stop()
        if filler is not None:
            filler.kill()
            filler.wait()
    s2 = start_stalkd(*flags)
    try:
        with Wire(port=s2.port) as w:
            assert int(stats(w)["current-jobs-ready"]) == len(acked)
            for jid, b in acked.items():
                assert w.cmd(b"peek %d\r\n" % jid) == b"FOUND %d %d\r\n%s\r\n" % (jid, len(b), b)
    finally:
        s2.stop()
