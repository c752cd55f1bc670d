"""Output piped into a reader that stops early (``stalkd tubes | head -3``) ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys

import greenstalk
import pytest

from support import start_beanstalkd


@pytest.mark.parametrize("args", [["tubes"], ["jobs", "list", "t", "--json"], ["stats"]])
def test_a_closed_pipe_ends_the_command_without_a_traceback(args: list[str]) -> None:
    # Given a server with something to print, and a pipe whose reader has already gone
    bs = start_beanstalkd()
    try:
        c = greenstalk.Client(("127.0.0.1", bs.port), use="t")
        for i in range(3):
            c.put(f"job {i}")
        c.close()
        r, w = os.pipe()
        os.close(r)
        env = {k: v for k, v in os.environ.items() if not k.startswith("STALKD_")}
        # When the command writes its answer there
        try:
            got = subprocess.run([sys.executable, "-m", "stalkd.cli", *args, "-a", bs.address],
                                 stdout=w, stderr=subprocess.PIPE, text=True, timeout=60, env=env)
        finally:
            os.close(w)
    finally:
        bs.stop()
    # Then it stops quietly: nothing on stderr, and success (the reader had what it wanted)
    assert got.stderr == "" and got.returncode == 0, got.stderr
