"""``-u USER``: the server switches user after its heavy imports (the user may be unable to
read the Python installation, as ``nobody`` cannot read a pyenv under /root) and reports a
clear error, never a traceback. Needs root (to switch) and a ``nobody`` user."""

from __future__ import annotations

import os
import pwd
import tempfile
from pathlib import Path

import pytest

from .proc import start_stalkd
from .wire import Wire

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="-u needs root")


def _uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError("no Uid line")


def test_serves_as_nobody_with_a_data_dir_it_owns() -> None:
    nobody = pwd.getpwnam("nobody")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        os.chown(data, nobody.pw_uid, nobody.pw_gid)
        os.chmod(tmp, 0o755)
        s = start_stalkd("-u", "nobody", "-b", str(data))
        try:
            with Wire(port=s.port) as w:
                assert w.cmd(b"put 0 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
                assert w.cmd(b"reserve\r\n") == b"RESERVED 1 2\r\nhi\r\n"
                assert w.cmd(b"stats-tube default\r\n").startswith(b"OK ")
            assert _uid(s.proc.pid) == nobody.pw_uid
        finally:
            s.stop()
        assert "Traceback" not in s.log_text()


def test_a_data_dir_the_user_cannot_open_is_a_clear_error() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir(mode=0o700)  # root's: nobody cannot enter it
        s = start_stalkd("-u", "nobody", "-b", str(data), wait=False)
        try:
            code = s.proc.wait(timeout=60)
        finally:
            s.stop()
        text = s.log_text()
        assert code != 0
        assert "Traceback" not in text
        assert "Permission denied" in text or "permission" in text.lower(), text


def test_an_unknown_user_is_a_clear_error() -> None:
    s = start_stalkd("-u", "no-such-user-here", wait=False)
    try:
        code = s.proc.wait(timeout=60)
    finally:
        s.stop()
    assert code == 111
    assert 'getpwnam("no-such-user-here"): no such user' in s.log_text()
