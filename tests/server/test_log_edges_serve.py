"""Issue 30's first reproduction on a real server: killed with SIGKILL before its first snapshot,
its WAL segments then deleted, it used to start empty without a word (200 of 200 acknowledged
jobs gone). It now refuses to start, naming the command; with --repair it starts from what is left."""

from __future__ import annotations

import time
from pathlib import Path

from server.proc import start_stalkd
from server.wire import Wire, stats
from stalkd.log.mark import read_mark


def test_a_server_whose_segments_were_deleted_refuses_to_start_empty(tmp_path: Path) -> None:
    data = tmp_path / "data"
    s = start_stalkd("-b", str(data))
    try:
        with Wire(port=s.port) as w:
            for i in range(200):
                assert w.cmd(b"put 0 0 60 7\r\njob %03d\r\n" % i).startswith(b"INSERTED ")
        deadline = time.monotonic() + 30
        while (read_mark(str(data / "wal")) or 0) < 200:  # the mark follows within ~100 ms
            assert time.monotonic() < deadline, "the high-water mark never covered the puts"
            time.sleep(0.01)
    finally:
        s.kill9()
    for seg in (data / "wal").glob("seg-*.log"):
        seg.unlink()
    # Then the server refuses to start, saying what is lost and which command to run
    s = start_stalkd("-b", str(data), wait=False)
    code = s.proc.wait(timeout=60)
    text = s.log_text()
    assert code != 0, text
    assert "no segment file" in text and f"stalkd log repair {data / 'wal'}" in text
    # When started with --repair, it starts (nothing of the deleted log is left) and serves
    s = start_stalkd("-b", str(data), "--repair")
    try:
        with Wire(port=s.port) as w:
            assert int(stats(w)["current-jobs-ready"]) == 0
            assert w.cmd(b"put 0 0 60 2\r\nhi\r\n").startswith(b"INSERTED ")
    finally:
        s.stop()
