"""A throwaway PostgreSQL 15 cluster for the tests (the outbox, the SQL results backend, the
Django recipe), one per session (tests/conftest.py loads this module as a plugin): initdb in a
temp dir, listening only on a UNIX socket in that dir (no TCP port to pick, so none to race
for), stopped by the postmaster's PID at the end of the session.

Running as root (CI containers), the cluster runs as the ``postgres`` system user, since
PostgreSQL refuses to run as root. Missing binaries skip locally and fail under CI.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from support import has_exited


def _pg_bin() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        msg = "PostgreSQL is not installed (scripts/system-deps.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return os.path.dirname(found[-1])


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@pytest.fixture(scope="session", name="postgres_url")
def postgres_cluster() -> Iterator[str]:
    bindir = _pg_bin()
    root = tempfile.mkdtemp(prefix="stalkd-pg-")
    data = os.path.join(root, "data")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    subprocess.run(_as_postgres([f"{bindir}/initdb", "-D", data, "-U", "stalkd", "-A", "trust",
                                 "--no-sync", "-E", "UTF8"]),
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = os.path.join(root, "server.log")
    subprocess.run(_as_postgres([f"{bindir}/pg_ctl", "-D", data, "-l", log, "-w", "-t", "60",
                                 "-o", f"-k {root} -c listen_addresses='' "
                                 "-c fsync=off -c full_page_writes=off", "start"]),
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(os.path.join(data, "postmaster.pid")) as f:
        pid = int(f.readline())
    try:
        yield f"postgresql+psycopg://stalkd@/postgres?host={root}"
    finally:
        os.kill(pid, signal.SIGINT)  # "fast" shutdown
        deadline = time.monotonic() + 30
        while not has_exited(pid):  # a zombie has exited: its reaper is PID 1, not us
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.01)
        shutil.rmtree(root, ignore_errors=True)
