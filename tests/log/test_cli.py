"""`stalkd log inspect`: report contents and exit codes, through the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stalkd.log import Log
from stalkd.log.segment import HEADER_SIZE


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stalkd.cli", "log", *args], capture_output=True, text=True, timeout=120)


def make(d: Path) -> None:
    with Log.open(d, segment_size=2048, durability="never") as log:
        log.append_many([b"y" * 40] * 100)
        g = log.group("mailer")
        g.ack(*g.poll(30))


def test_inspect_reports_segments_groups_and_lag(tmp_path: Path) -> None:
    make(tmp_path)
    r = run("inspect", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["next_offset"] == 100 and rep["corrupt"] == []
    assert sum(s["frames"] for s in rep["segments"]) == 100
    assert [s["sealed"] for s in rep["segments"]][-1] is False
    assert rep["groups"] == [{"name": "mailer", "committed": 30, "lag": 70, "acked_ahead": 0, "expired": 0, "dropped": 0}]
    text = run("inspect", str(tmp_path), "--verify")
    assert text.returncode == 0 and "verify: OK" in text.stdout and "mailer" in text.stdout


def test_inspect_verify_exits_1_on_corruption_and_names_the_place(tmp_path: Path) -> None:
    make(tmp_path)
    seg = sorted(tmp_path.glob("seg-*.log"))[1]
    with open(seg, "r+b") as f:
        f.seek(HEADER_SIZE + 64 + 30)
        f.write(b"\x00\xff")
    assert run("inspect", str(tmp_path)).returncode == 0  # without --verify sealed frames are trusted
    r = run("inspect", str(tmp_path), "--verify")
    assert r.returncode == 1
    assert f"CORRUPT {seg} byte {HEADER_SIZE + 64}" in r.stdout


def test_inspect_usage_errors(tmp_path: Path) -> None:
    assert run("inspect", str(tmp_path / "missing")).returncode == 2
    assert run("inspect", str(tmp_path), "-b", str(tmp_path)).returncode == 2
    assert run().returncode == 2


def test_inspect_takes_the_server_data_directory_too(tmp_path: Path) -> None:
    make(tmp_path / "wal")
    for args in ([str(tmp_path)], ["-b", str(tmp_path)], [str(tmp_path / "wal")]):
        r = run("inspect", *args, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["next_offset"] == 100


def test_inspect_of_a_directory_without_a_log_says_so_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "snapshots").mkdir()
    r = run("inspect", str(tmp_path), "--verify")
    assert r.returncode == 2
    assert "no stalkd log here" in r.stderr and "seg-*.log" in r.stderr
    assert r.stdout == ""


def test_inspect_names_no_writer_when_the_process_in_lock_has_exited_unreaped(tmp_path: Path) -> None:
    from stalkd.log.cli import inspect

    # Given a writer that took the lock and exited, and that nobody has reaped yet (a zombie)
    writer = subprocess.Popen([sys.executable, "-c",
                               "import sys; from stalkd.log import Log; "
                               "log = Log.open(sys.argv[1], durability='never'); "
                               "print('open', flush=True); sys.stdin.read()", str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None and writer.stdin is not None
        assert writer.stdout.readline() == b"open\n"
        # While it runs, inspect names it
        assert inspect(str(tmp_path))["writer"] == f"pid {writer.pid}"
        writer.stdin.close()
        os.waitid(os.P_PID, writer.pid, os.WEXITED | os.WNOWAIT)
        # Then inspect says it is gone, not that it still writes
        assert inspect(str(tmp_path))["writer"] == f"none (last: pid {writer.pid})"
    finally:
        writer.wait()
