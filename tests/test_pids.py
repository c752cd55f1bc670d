"""``stalkd.pids.pid_alive``: a process that has exited is not alive, reaped or not."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from stalkd.pids import pid_alive
from support import run_doctests


@pytest.fixture
def waiting_child() -> Iterator[subprocess.Popen[bytes]]:
    """A child that runs until its stdin is closed, reaped at the end of the test."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait()


def exit_unreaped(proc: subprocess.Popen[bytes]) -> None:
    """Let ``proc`` exit and return once it has, leaving it a zombie (not reaped)."""
    assert proc.stdin is not None
    proc.stdin.close()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)


def test_a_running_process_is_alive_and_a_zombie_is_not(waiting_child: subprocess.Popen[bytes]) -> None:
    assert pid_alive(waiting_child.pid)
    exit_unreaped(waiting_child)
    # kill(pid, 0) still succeeds here: only the process's state says it has exited
    os.kill(waiting_child.pid, 0)
    assert not pid_alive(waiting_child.pid)


def test_a_reaped_process_and_non_process_ids_are_not_alive(
        waiting_child: subprocess.Popen[bytes]) -> None:
    exit_unreaped(waiting_child)
    waiting_child.wait()
    assert not pid_alive(waiting_child.pid)
    assert not pid_alive(0) and not pid_alive(-1)  # kill() would read these as process groups
    assert pid_alive(os.getpid())


def test_docstring_examples() -> None:
    import stalkd.pids

    assert run_doctests(stalkd.pids).failed == 0
