"""A server killed with SIGKILL again and again, each run writing less than a snapshot's worth,
still compacts (issue 34 item 2): the WAL after N cycles of a steady workload stays within the
bound it keeps under churn, 2 x the live data + 2 segments (before: it grew by each run's writes,
for ever), both its frames' bytes and its segment files (preallocated, a segment each: a third
file kept for the last snapshot passed the bound while the frames were within it).
bench/crashloop_bench.py prints the curve over hundreds of cycles."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.proc import start_stalkd
from server.wire import Wire, stats
from stalkd.log import LogReader
from stalkd.log.frame import frame_size
from stalkd.persist.compaction import wal_bound

SEG = 256 * 1024
BODY = 1000
LIVE = 50
PUTS = 100  # a cycle writes ~110 KB of WAL: under the segment the trigger waited for per run
CYCLES = 12


def wal_data_bytes(data: Path) -> int:
    with LogReader(str(data / "wal"), archive=False) as r:
        return sum(frame_size(len(f.bytes())) for f in r.read(0))


def wal_file_bytes(data: Path) -> int:
    """The WAL's segment files (spares and snapshots apart)."""
    return sum(p.stat().st_size for p in (data / "wal").glob("seg-*.log"))


@pytest.mark.slow
def test_wal_stays_bounded_when_killed_before_each_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    live: list[int] = []
    sizes, files = [], []
    for _ in range(CYCLES):
        s = start_stalkd("-b", str(data), "-s", str(SEG), "-F")
        try:
            with Wire(port=s.port) as w:
                for _ in range(PUTS):
                    reply = w.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (BODY, b"b" * BODY))
                    assert reply.startswith(b"INSERTED "), reply
                    live.append(int(reply.split()[1]))
                    if len(live) > LIVE:
                        assert w.cmd(b"delete %d\r\n" % live.pop(0)) == b"DELETED\r\n"
                assert int(stats(w)["current-jobs-ready"]) == LIVE
        finally:
            s.kill9()
        sizes.append(wal_data_bytes(data))
        files.append(wal_file_bytes(data))
    bound = wal_bound(LIVE * (BODY + 100), SEG)  # (it allows 2 segment files, not 3)
    assert max(sizes) <= bound, (sizes, bound)
    assert max(files) <= bound, (files, bound)
    # And nothing acknowledged was lost along the way
    s = start_stalkd("-b", str(data), "-s", str(SEG), "-F")
    try:
        with Wire(port=s.port) as w:
            assert int(stats(w)["current-jobs-ready"]) == LIVE
            for jid in live:
                assert w.cmd(b"peek %d\r\n" % jid).startswith(b"FOUND %d" % jid)
    finally:
        s.stop()
