"""``stalkd tubes|jobs|pause`` run as a person runs them: a subprocess, over the admin API and
over the protocol (against stalkd and Debian's beanstalkd)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import greenstalk

from admin.adminproc import AdminServer
from support import ServerProcess, start_beanstalkd


def stalkd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("STALKD_")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "stalkd.cli", *args], capture_output=True,
                          text=True, timeout=120, env=full)


def _json(*args: str) -> object:
    got = stalkd(*args, "--json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def _bury_many(port: int, tube: str, n: int) -> None:
    """``n`` buried jobs in ``tube``: one pipelined exchange (ids 1..n on a fresh server)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(60)
        out = [f"use {tube}\r\nwatch {tube}\r\nignore default\r\n".encode()]
        out += [b"put 0 0 60 3\r\nabc\r\n"] * n
        out += [f"reserve-with-timeout 0\r\nbury {i} 0\r\n".encode() for i in range(1, n + 1)]
        s.sendall(b"".join(out))
        want = 3 + 3 * n
        got = b""
        while got.count(b"\r\n") < want + n:  # RESERVED lines carry a body line each
            chunk = s.recv(1 << 20)
            assert chunk, "server closed"
            got += chunk
        assert got.count(b"BURIED\r\n") == n, got[-200:]


def test_delete_ten_thousand_buried_jobs_over_the_admin_api(server: AdminServer) -> None:
    _bury_many(server.port, "emails", 10_000)
    out = _json("jobs", "delete", "emails", "--state", "buried", "--admin", server.admin)
    assert out == {**out, "requested": 10_000, "outcomes": {"deleted": 10_000}}
    tubes = _json("tubes", "--admin", server.admin)
    assert [t for t in tubes if t["name"] == "emails"] == []  # emptied and unused: dropped


def test_list_kick_move_and_pause_over_both_paths(server: AdminServer) -> None:
    _bury_many(server.port, "emails", 3)
    for how in (["--admin", server.admin], ["-a", server.address]):
        page = _json("jobs", "list", "emails", "--state", "buried", *how)
        assert [j["id"] for j in page["jobs"]] == [1, 2, 3], how
        assert page["jobs"][0]["body"] == "abc"
    assert _json("jobs", "kick", "emails", "--id", "2", "-a", server.address)["outcomes"] == {"kicked": 1}
    assert _json("jobs", "kick", "emails", "--admin", server.admin)["outcomes"] == {"kicked": 2}
    moved = _json("jobs", "move", "emails", "--state", "ready", "--to", "later", "--admin", server.admin)
    assert moved["outcomes"] == {"moved": 3}
    rows = {t["name"]: t for t in _json("tubes", "-a", server.address)}
    assert rows["later"]["ready"] == 3
    got = stalkd("pause", "later", "60", "--admin", server.admin)
    assert got.returncode == 0 and "paused for 60s" in got.stdout
    rows = {t["name"]: t for t in _json("tubes", "--admin", server.admin)}
    assert rows["later"]["paused"]


def test_usage_errors_are_clear(server: AdminServer) -> None:
    got = stalkd("jobs", "delete", "emails", "--admin", server.admin)
    assert got.returncode == 2 and "--state" in got.stderr
    got = stalkd("jobs", "move", "emails", "--state", "all", "--admin", server.admin)
    assert got.returncode == 2 and "--to" in got.stderr
    got = stalkd("pause", "nosuchtube", "5", "-a", server.address)
    assert got.returncode == 1 and "no such tube" in got.stdout
    got = stalkd("tubes", "--admin", "127.0.0.1:1")
    assert got.returncode == 3 and "cannot reach" in got.stderr


def test_protocol_path_works_against_beanstalkd() -> None:
    bs: ServerProcess = start_beanstalkd()
    try:
        _bury_many(bs.port, "emails", 50)
        assert _json("jobs", "delete", "emails", "--state", "buried", "-a", bs.address)["outcomes"] == \
            {"deleted": 50}
        assert [t["name"] for t in _json("tubes", "-a", bs.address)] == ["default"]
    finally:
        bs.stop()


def test_dashboard_command_prints_a_url_that_answers(server: AdminServer) -> None:
    got = stalkd("dashboard", "--admin", server.admin.removeprefix("http://"))
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == server.admin + "/"
    got = stalkd("dashboard")  # no admin endpoint given
    assert got.returncode == 2 and "--admin" in got.stderr


def test_tubes_hides_internal_tubes_unless_asked(server: AdminServer) -> None:
    for tube in ("emails", "stalkd.failed", "stalkd.key.ab12"):
        c = greenstalk.Client(("127.0.0.1", server.port), use=tube)
        c.put("x")
        c.close()
    for path in (("--admin", server.admin), ()):  # the admin API, then the plain protocol
        listed = stalkd("tubes", "-a", server.address, *path)
        assert listed.returncode == 0, listed.stderr
        names = [ln.split()[0] for ln in listed.stdout.splitlines()[1:] if ln and ln[0] != "("]
        assert names == ["default", "emails"], listed.stdout
        assert "2 internal stalkd.* tube(s) hidden: --internal shows them" in listed.stdout
        rows = _json("tubes", "-a", server.address, *path, "--internal")
        assert isinstance(rows, list)
        assert [(r["name"], r["internal"]) for r in rows] == [
            ("default", False), ("emails", False), ("stalkd.failed", True),
            ("stalkd.key.ab12", True)]


def test_move_keeps_a_dead_letter_and_says_ids_change(server: AdminServer) -> None:
    from stalkd.worker.actions import DeadLetter

    for n, how in enumerate((["--admin", server.admin], ["-a", server.address])):
        # Given a dead-lettered job: buried, with its record in stalkd.failed
        c = greenstalk.Client(("127.0.0.1", server.port), use=f"mail{n}", watch=f"mail{n}")
        jid = c.put("body")
        c.bury(c.reserve())
        c.use("stalkd.failed")
        c.put(DeadLetter(job_id=jid, tube=f"mail{n}", task="send", attempts=5,
                         error="SMTPError('full')", traceback="Traceback ...", failed_at=1.0,
                         body=b"body").to_json().decode())
        c.close()
        # When it is moved
        got = stalkd("jobs", "move", f"mail{n}", "--state", "buried", "--to", f"later{n}", *how)
        assert got.returncode == 0, got.stderr
        # Then the output says the id changed, and stalkd failed shows its error under the new id
        new = int(got.stdout.split(f"{jid} -> ")[1].split()[0].rstrip(","))
        assert "moved jobs get new ids" in got.stdout and new != jid
        failed = stalkd("failed", "-a", server.address, "--json")
        records = [json.loads(line) for line in failed.stdout.splitlines()]
        mine = [r for r in records if r["job_id"] == new]
        assert mine and mine[0]["tube"] == f"later{n}", records
        assert mine[0]["error"] == "SMTPError('full')" and mine[0]["traceback"] == "Traceback ..."
        assert not [r for r in records if r["job_id"] == jid]
