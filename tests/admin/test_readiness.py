"""/readyz turns 503 when the disk is full, and the refusals are counted in /metrics (a real
server on a small tmpfs; skipped where mounting is not allowed)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from admin.adminproc import start_admin_server
from server.wire import Wire
from support import small_tmpfs


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path, "4m") as mnt:
        yield mnt


def test_readyz_reports_a_full_disk(small_fs: Path) -> None:
    srv = start_admin_server("-b", str(small_fs / "data"), "-s", "16384", "-z", "2048")
    try:
        assert srv.request("GET", "/readyz")[0] == 200
        st = os.statvfs(small_fs)
        with open(small_fs / "ballast", "wb") as f:
            f.write(b"\1" * max(0, st.f_bavail * st.f_frsize - 256 * 1024))
        body = b"j" * 1000
        with Wire(port=srv.port) as w:
            for _ in range(5000):
                if w.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)) == b"OUT_OF_MEMORY\r\n":
                    break
            else:
                pytest.fail("the disk never filled")
        status, text = srv.request("GET", "/readyz")
        assert status == 503 and "disk full" in text
        metrics = srv.request("GET", "/metrics")[1]
        m = re.search(r"^stalkd_disk_full_refusals_total (\S+)$", metrics, re.M)
        assert m is not None and float(m.group(1)) >= 1
        assert srv.request("GET", "/healthz")[0] == 200  # alive all along
    finally:
        srv.stop()
