"""``stalkd serve`` on a damaged WAL (issue 11 item 1): it refuses to start naming the command,
and ``--repair`` cuts the damage, keeps the bytes, and logs the job ids still readable in them."""

from __future__ import annotations

import glob
from pathlib import Path

from server.proc import start_stalkd
from server.wire import Wire, stats
from stalkd.persist.wal import Wal
from stalkd.protocol.commands import Put

T = 1_700_000_000.0


def damaged_data_dir(d: Path) -> None:
    """A data dir of 1,000 jobs whose active segment has 8 bytes overwritten (closed as a kill -9
    leaves it)."""
    wal = Wal.open(d, durability="always", segment_size=65536)
    eng, _ = wal.recover(now=T)
    eng.connect(1, T)
    for i in range(1000):
        wal.write(eng.apply(1, Put(0, 0, 60, b"job %d" % i), T).records)
    wal.sync()
    _, end = wal.log.position_of_end()
    wal.abandon()
    seg = sorted(glob.glob(f"{d}/wal/seg-*.log"))[-1]
    assert end > 4000
    with open(seg, "r+b") as f:
        f.seek(2000)
        f.write(b"\xa5" * 8)


def test_serve_refuses_a_damaged_wal_and_repair_starts_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    damaged_data_dir(data)
    # Then the server refuses to start, and says which command to run
    s = start_stalkd("-b", str(data), "-s", "65536", wait=False)
    code = s.proc.wait(timeout=60)
    text = s.log_text()
    assert code != 0, text
    assert "stalkd log repair" in text and "valid frames follow it" in text and "seg-" in text
    # When started with --repair it serves the jobs before the damage and logs what was cut
    s = start_stalkd("-b", str(data), "-s", "65536", "--repair")
    try:
        with Wire(port=s.port) as w:
            ready = int(stats(w)["current-jobs-ready"])
            assert 0 < ready < 1000
            assert w.cmd(b"put 0 0 60 2\r\nhi\r\n").startswith(b"INSERTED")
        text = s.log_text()
        assert "repair:" in text and "dropped" in text and "records still readable" in text
        assert f"of jobs {ready + 2}-1000" in text  # the jobs past the damaged one
    finally:
        s.stop()
    assert glob.glob(f"{data}/wal/dropped/*")
