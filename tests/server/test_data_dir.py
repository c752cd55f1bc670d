"""The server's data directory (-b): private files, and a symlink planted there refused."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from server.proc import start_stalkd
from server.wire import Wire


def test_a_lock_symlink_in_the_data_dir_stops_the_server_and_spares_its_target(tmp_path: Path) -> None:
    """Given another user's file behind a ``LOCK`` symlink, when stalkd starts on that data
    directory, then it refuses to start, names the link, and the file keeps its bytes."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    data = tmp_path / "data"
    (data / "wal").mkdir(parents=True)
    (data / "wal" / "LOCK").symlink_to(victim)
    r = subprocess.run([sys.executable, "-m", "stalkd.node.cli", "-l", "127.0.0.1", "-p", "0", "-b", str(data)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode != 0
    assert "LOCK is a symbolic link" in r.stderr and "Traceback" not in r.stderr
    assert victim.read_bytes() == b"precious\n"


def test_what_the_server_writes_is_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = start_stalkd("-b", str(data))
    try:
        with Wire(port=srv.port) as w:
            assert w.cmd(b"put 0 0 60 3\r\nabc\r\n").startswith(b"INSERTED")
    finally:
        srv.stop()
    modes = {str(p.relative_to(data)): stat.S_IMODE(os.lstat(p).st_mode) for p in data.rglob("*")}
    assert modes and all(m == (0o700 if (data / p).is_dir() else 0o600) for p, m in modes.items()), modes
