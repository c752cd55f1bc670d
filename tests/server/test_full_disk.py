"""A full disk refuses writes and keeps serving reads (docs/protocol.md, "Persistence").

Through the real server on a small tmpfs this test mounts: puts get OUT_OF_MEMORY, deletes of
existing jobs still succeed (their room was promised by their put), peek/stats/reserve work,
puts work again once space returns, and a SIGKILL + restart gives exactly the acknowledged
state. Skipped, like tests/log/test_full_disk.py, where mounting is not allowed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.proc import start_stalkd
from server.wire import Wire, stats
from support import small_tmpfs


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for this test (needs root and mount; skipped where forbidden)."""
    with small_tmpfs(tmp_path, "4m") as mnt:
        yield mnt


def _fill(path: Path, leave: int) -> None:
    """Write a ballast file until only about ``leave`` bytes are free on ``path``'s file system."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    with open(path / "ballast", "wb") as f:
        f.write(b"\1" * max(0, free - leave))


def test_full_disk_refuses_puts_keeps_reads_and_deletes(small_fs: Path) -> None:
    data = small_fs / "data"
    flags = ("-b", str(data), "-s", "16384", "-z", "2048")
    body = b"j" * 1000
    s = start_stalkd(*flags)
    acked: dict[int, bytes] = {}
    try:
        with Wire(port=s.port) as w:
            # Given a disk with about half a megabyte left
            assert w.cmd(b"put 0 0 60 5\r\nfirst\r\n") == b"INSERTED 1\r\n"
            acked[1] = b"first"
            _fill(small_fs, 512 * 1024)
            # When puts fill it, the first refused put gets OUT_OF_MEMORY and changes nothing
            _put_until_full(w, body, acked)
            assert len(acked) > 50
            again = w.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
            assert again == b"OUT_OF_MEMORY\r\n"  # still full
            st = stats(w)
            assert int(st["current-jobs-ready"]) == len(acked)
            assert int(st["total-jobs"]) == len(acked)  # refused puts made no job
            # Then reads keep working: peek, stats-job, reserve of an existing job
            assert w.cmd(b"peek 1\r\n") == b"FOUND 1 5\r\nfirst\r\n"
            assert stats(w, b"stats-job 1\r\n")["state"] == "ready"
            assert w.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 5\r\nfirst\r\n"
            assert w.cmd(b"release 1 0 0\r\n") in (b"RELEASED\r\n", b"OUT_OF_MEMORY\r\n")
            # And every delete of an existing job succeeds (here: every even id), even where it
            # needs a new WAL segment on the full disk
            segment_before = stats(w)["binlog-current-index"]
            for jid in sorted(acked):
                if jid % 2 == 0:
                    assert w.cmd(b"delete %d\r\n" % jid) == b"DELETED\r\n", jid
                    del acked[jid]
            assert stats(w)["binlog-current-index"] != segment_before
            assert w.cmd(b"peek 2\r\n") == b"NOT_FOUND\r\n"
            # When space returns, puts work again
            (small_fs / "ballast").unlink()
            reply = w.cmd(b"put 0 0 60 5\r\nlater\r\n")
            assert reply.startswith(b"INSERTED "), reply
            acked[int(reply.split()[1])] = b"later"
        assert s.proc.poll() is None, s.log_text()  # the server never stopped
        s.kill9()
    finally:
        s.stop()
    # Then a restart holds exactly the acknowledged state
    s2 = start_stalkd(*flags)
    try:
        with Wire(port=s2.port) as w:
            assert int(stats(w)["current-jobs-ready"]) == len(acked)
            for jid, b in acked.items():
                assert w.cmd(b"peek %d\r\n" % jid) == b"FOUND %d %d\r\n%s\r\n" % (jid, len(b), b)
            assert w.cmd(b"peek 2\r\n") == b"NOT_FOUND\r\n"
    finally:
        s2.stop()


def _put_until_full(w: Wire, body: bytes, acked: dict[int, bytes]) -> None:
    for _ in range(5000):
        reply = w.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
        if reply == b"OUT_OF_MEMORY\r\n":
            return
        assert reply.startswith(b"INSERTED "), reply
        acked[int(reply.split()[1])] = body
    pytest.fail("the disk never filled")


def test_restart_on_a_full_disk_keeps_the_acknowledged_state(small_fs: Path) -> None:
    data = small_fs / "data"
    flags = ("-b", str(data), "-s", "16384", "-z", "2048")
    body = b"k" * 700
    acked: dict[int, bytes] = {}
    s = start_stalkd(*flags)
    try:
        with Wire(port=s.port) as w:
            # Given a disk filled by puts and the server killed while it is full
            assert w.cmd(b"put 0 0 60 1\r\nz\r\n") == b"INSERTED 1\r\n"
            acked[1] = b"z"
            _fill(small_fs, 256 * 1024)
            _put_until_full(w, body, acked)
            assert w.cmd(b"reserve\r\n") == b"RESERVED 1 1\r\nz\r\n"
            assert w.cmd(b"bury 1 3\r\n") in (b"BURIED\r\n", b"OUT_OF_MEMORY\r\n")
            buried = stats(w, b"stats-job 1\r\n")["state"] == "buried"
        s.kill9()
    finally:
        s.stop()
    # When it restarts on the still-full disk
    s2 = start_stalkd(*flags)
    try:
        with Wire(port=s2.port) as w:
            # Then it holds exactly the acknowledged jobs, refuses puts, and deletes all of them
            assert int(stats(w)["current-jobs-ready"]) + int(buried) == len(acked)
            assert stats(w, b"stats-job 1\r\n")["state"] == ("buried" if buried else "ready")
            # (A snapshot the restart takes may free dead WAL, and puts then fit: that is the
            # disk clearing on its own, so they are acknowledged until one is refused.)
            _put_until_full(w, body, acked)
            for jid, b in sorted(acked.items()):
                assert w.cmd(b"peek %d\r\n" % jid) == b"FOUND %d %d\r\n%s\r\n" % (jid, len(b), b)
                assert w.cmd(b"delete %d\r\n" % jid) == b"DELETED\r\n"
            assert int(stats(w)["current-jobs-ready"]) == 0
        assert s2.proc.poll() is None, s2.log_text()
    finally:
        s2.stop()
