"""``stalkd jobs list|delete|kick|move`` over the plain protocol (no --admin), after a restart:
job ids go on from before it while ``total-jobs`` starts again from 0, so nothing may be found
by scanning ids 1..total-jobs. Run against stalkd and Debian's beanstalkd (with a binlog)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import greenstalk
import pytest

from admin.adminproc import start_admin_server
from admin.test_cli import _json, stalkd
from support import start_beanstalkd

Restartable = Callable[[], tuple[str, Callable[[], None]]]


def _stalkd(data: Path) -> tuple[str, Callable[[], None]]:
    srv = start_admin_server("--dir", str(data))
    return srv.address, srv.stop


def _beanstalkd(data: Path) -> tuple[str, Callable[[], None]]:
    bs = start_beanstalkd("-b", str(data))
    return bs.address, bs.stop


@pytest.fixture(params=["stalkd", "beanstalkd"])
def restarted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The address of a server that handed out ids 1..100 (all deleted) before a restart."""
    start = _stalkd if request.param == "stalkd" else _beanstalkd
    data = tmp_path / "data"
    os.makedirs(data, mode=0o700)
    address, stop = start(data)
    try:
        c = _client(address, "old")
        for _ in range(100):
            c.delete(c.put("x"))
        c.close()
    finally:
        stop()
    address, stop = start(data)
    try:
        yield address
    finally:
        stop()


def _client(address: str, tube: str) -> greenstalk.Client:
    host, port = address.rsplit(":", 1)
    return greenstalk.Client((host, int(port)), use=tube, watch=tube)


def _bury_one(c: greenstalk.Client, body: str, pri: int = 5) -> int:
    jid = c.put(body, priority=pri)
    job = c.reserve(timeout=5)
    assert job.id == jid
    c.bury(job, priority=pri)
    return jid


def test_jobs_put_after_a_restart_are_listed_kicked_moved_and_deleted(restarted: str) -> None:
    # Given, after the restart, two buried jobs and one ready job in emails
    c = _client(restarted, "emails")
    b1, b2 = _bury_one(c, "b1"), _bury_one(c, "b2")
    ready = c.put("r", priority=7)
    assert min(b1, b2, ready) > 100  # ids went on from before the restart

    # When they are listed over the protocol, twice
    for _ in range(2):
        page = _json("jobs", "list", "emails", "-a", restarted)
        assert isinstance(page, dict)
        # Then every one is there, in its state, and the listing is complete
        assert [(j["id"], j["state"]) for j in page["jobs"]] == [
            (b1, "buried"), (b2, "buried"), (ready, "ready")]
        assert "partial" not in page
    # and listing changed none of them: states, order of the buried FIFO, priorities, releases
    assert c.stats_job(ready)["state"] == "ready" and c.stats_job(ready)["releases"] == 0
    assert c.stats_job(b1)["pri"] == 5 and c.peek_buried().id == b1

    # When the buried ones are kicked, then everything is moved, then deleted
    assert _json("jobs", "kick", "emails", "-a", restarted)["outcomes"] == {"kicked": 2}  # type: ignore[index]
    moved = _json("jobs", "move", "emails", "--state", "all", "--to", "later", "-a", restarted)
    assert isinstance(moved, dict) and moved["outcomes"] == {"moved": 3}
    assert _json("jobs", "list", "emails", "-a", restarted)["jobs"] == []  # type: ignore[index]
    out = _json("jobs", "delete", "later", "--state", "all", "-a", restarted)
    # Then each found all it was asked for
    assert out["outcomes"] == {"deleted": 3}  # type: ignore[index]
    c.close()


def test_a_listing_the_protocol_cannot_complete_says_so(restarted: str) -> None:
    # Given delayed jobs (which cannot be borrowed without changing them)
    c = _client(restarted, "later")
    first = c.put("soon", delay=600)
    c.put("later", delay=900)
    # When listed over the protocol
    got = stalkd("jobs", "list", "later", "-a", restarted)
    # Then the first one due is shown, and the answer says one was not listed, and how to see it
    assert got.returncode == 0, got.stderr
    assert str(first) in got.stdout
    assert "not listed: 1 delayed" in got.stdout and "--admin" in got.stdout
    c.close()
