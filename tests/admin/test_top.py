"""``stalkd top`` in a real terminal: tmux runs it, send-keys types, capture-pane reads the screen."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import greenstalk

from admin.adminproc import AdminServer, make_tubes
from stalkd.admin.top import Sample, rows
from support import require_binary, start_beanstalkd


class Tmux:
    """One detached tmux session on a private socket, killed at the end."""

    def __init__(self, command: str) -> None:
        self.exe = require_binary("tmux")
        self.sock = f"stalkd-top-{uuid.uuid4().hex[:8]}"
        self.name = "top"
        self._tmux("new-session", "-d", "-s", self.name, "-x", "120", "-y", "30", command)

    def _tmux(self, *args: str) -> str:
        got = subprocess.run([self.exe, "-L", self.sock, *args], capture_output=True, text=True,
                             timeout=20)
        return got.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def alive(self) -> bool:
        return self.name in self._tmux("list-sessions", "-F", "#{session_name}")

    def wait(self, cond: Callable[[str], bool], timeout: float = 30.0) -> str:
        """Poll the screen until ``cond`` holds (tmux has no event to wait on)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if cond(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"screen never matched:\n{text}")
            time.sleep(0.1)

    def kill(self) -> None:
        self._tmux("kill-server")


def _top(*args: str) -> Tmux:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in (("PYTHONDONTWRITEBYTECODE", "1"),
                                                       ("TERM", "xterm-256color")))
    cmd = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "stalkd.cli", "top", *args))
    # keep the pane open after top exits, so the test can tell "exited" from "crashed"
    return Tmux(f"env {env} {cmd}; echo TOP-EXITED-$?; sleep 30")


def test_top_shows_tubes_and_fsync_and_quits_on_q(server: AdminServer) -> None:
    c = greenstalk.Client(("127.0.0.1", server.port), use="emails")
    c.put("a")
    t = _top("-a", server.address, "--admin", server.admin, "-n", "0.3")
    try:
        screen = t.wait(lambda s: "emails" in s and "fsync" in s)
        assert "READY" in screen and "WAITING" in screen
        for _ in range(4):
            c.put("b")
        screen = t.wait(lambda s: any(ln.split()[:2] == ["emails", "5"] for ln in s.splitlines()))
        # the admin endpoint's figures: fsync latency, disk use, readiness
        assert re.search(r"fsync [0-9.]+ ms avg +WAL [0-9.]+ MiB .* ready", screen), screen
        t.keys("q")
        t.wait(lambda s: "TOP-EXITED-0" in s)
    finally:
        t.kill()
        c.close()


def test_top_works_against_debian_beanstalkd() -> None:
    bs = start_beanstalkd()
    try:
        c = greenstalk.Client(("127.0.0.1", bs.port), use="jobs-bs")
        c.put("x")
        t = _top("-a", bs.address, "-n", "0.3")
        try:
            t.wait(lambda s: any(ln.split()[:2] == ["jobs-bs", "1"] for ln in s.splitlines()))
            t.keys("q")
            t.wait(lambda s: "TOP-EXITED-0" in s)
        finally:
            t.kill()
        c.close()
    finally:
        bs.stop()


def test_rates_come_from_two_samples() -> None:
    a = Sample(10.0, {}, {"t": {"total-jobs": 100, "cmd-delete": 50, "current-jobs-ready": 3}})
    b = Sample(12.0, {}, {"t": {"total-jobs": 140, "cmd-delete": 90, "current-jobs-ready": 5},
                          "new": {"total-jobs": 7}})
    got = {r["tube"]: r for r in rows(b, a)}
    assert (got["t"]["puts"], got["t"]["deletes"], got["t"]["ready"]) == (20.0, 20.0, 5)
    assert got["new"]["puts"] == 0.0  # no earlier reading: no rate yet


def test_top_hides_internal_tubes_and_i_shows_them(server: AdminServer) -> None:
    clients = [greenstalk.Client(("127.0.0.1", server.port), use=t)
               for t in ("emails", "stalkd.failed", "stalkd.key.ab12")]
    for c in clients:
        c.put("x")
    t = _top("-a", server.address, "-n", "0.3")
    try:
        screen = t.wait(lambda s: "emails" in s and "2 hidden" in s)
        assert "stalkd.failed" not in screen and "stalkd.key" not in screen
        t.keys("i")
        screen = t.wait(lambda s: "stalkd.failed" in s and "stalkd.key.ab12" in s)
        assert "hides internal tubes" in screen
        t.keys("i")
        t.wait(lambda s: "stalkd.failed" not in s and "emails" in s)
        t.keys("q")
        t.wait(lambda s: "TOP-EXITED-0" in s)
    finally:
        t.kill()
        for c in clients:
            c.close()


def test_top_with_admin_alone_reads_that_server_and_refuses_two(server: AdminServer) -> None:
    # Given a second server with a tube of its own
    other = start_beanstalkd()
    mine = greenstalk.Client(("127.0.0.1", server.port), use="mine")
    mine.put("a")
    try:
        # When top is given the admin endpoint alone
        t = _top("--admin", server.admin, "-n", "0.3")
        try:
            # Then its tubes are the admin endpoint's server's, beside its fsync figures
            t.wait(lambda s: "mine" in s and "fsync" in s)
            t.keys("q")
            t.wait(lambda s: "TOP-EXITED-0" in s)
        finally:
            t.kill()
        # When -a names another server than --admin
        got = subprocess.run([sys.executable, "-m", "stalkd.cli", "top", "-a", other.address,
                              "--admin", server.admin], capture_output=True, text=True, timeout=60)
        # Then it refuses, naming both
        assert got.returncode == 2, got.stderr
        assert "two different servers" in got.stderr and other.address in got.stderr
    finally:
        mine.close()
        other.stop()


def _tube_lines(screen: str) -> list[str]:
    return [ln.split()[0] for ln in screen.splitlines() if re.match(r"t\d{5} ", ln)]


def _first_page(screen: str) -> int | None:
    """The page size of a whole first page by name (its header's count, and every tube line
    the header says, in order after "default"), else None."""
    m = re.search(r"tubes 1-(\d+) of 61 ", screen)
    if m is None:
        return None
    k = int(m.group(1))
    return k if _tube_lines(screen) == [f"t{i:05d}" for i in range(k - 1)] else None


def test_top_pages_orders_and_searches_many_tubes(server: AdminServer) -> None:
    # Given 60 tubes, t00059 the busiest: more than the terminal shows
    make_tubes(server.port, 60, more=3)
    for args in (("--admin", server.admin), ("-a", server.address)):  # the server or top chooses
        t = _top(*args, "-n", "0.3", "--sort", "name")
        try:
            # a page that fits the terminal, by name: the first whole frame (a capture can land
            # while top redraws, its header new and a line of the frame before still below it)
            screen = t.wait(lambda s: _first_page(s) is not None)
            k = _first_page(screen)
            assert k is not None and 5 <= k < 61
            assert _tube_lines(screen) == [f"t{i:05d}" for i in range(k - 1)]  # after "default"
            t.keys("n")
            second = f"tubes {k + 1}-{2 * k} of 61 "
            page2 = [f"t{i:05d}" for i in range(k - 1, 2 * k - 1)]
            screen = t.wait(lambda s, want=second, page=page2: want in s and _tube_lines(s) == page)
            assert _tube_lines(screen) == page2
            t.keys("p")
            first = f"tubes 1-{k} of 61 "
            t.wait(lambda s, want=first: want in s)
            # the busiest first
            t.keys("s")
            t.keys("s")  # name -> created -> ready
            screen = t.wait(lambda s: "order: ready" in s)
            assert _tube_lines(screen)[0] == "t00059", screen
            # a search, typed after /
            t.keys("/")
            t.keys("t0004")
            t.keys("Enter")
            screen = t.wait(lambda s: "tubes 1-10 of 10" in s and re.search(r"/t0004$", s, re.M) is not None)
            assert sorted(_tube_lines(screen)) == [f"t{i:05d}" for i in range(40, 50)]
            t.keys("/")
            t.keys("Escape")
            t.wait(lambda s: "of 61" in s and "/ search" in s)
            t.keys("q")
            t.wait(lambda s: "TOP-EXITED-0" in s)
        finally:
            t.kill()
