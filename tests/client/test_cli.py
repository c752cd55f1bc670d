"""The client CLI as a user runs it: subprocesses against a real server, checking output,
JSON and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stalkd.client import Client
from support import ServerProcess


def run(server: ServerProcess | None, *args: str, stdin: bytes = b"",
        env_addr: bool = True) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    env.pop("STALKD_ADDR", None)
    if server is not None and env_addr:
        env["STALKD_ADDR"] = server.address
    return subprocess.run([sys.executable, "-m", "stalkd.cli", *args], input=stdin,
                          capture_output=True, env=env, timeout=60)


def out(p: subprocess.CompletedProcess[bytes]) -> str:
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def test_put_prints_ids_and_jobs_land_in_the_tube(server: ServerProcess) -> None:
    # When a user puts from arguments, from stdin, and line by line
    ids = out(run(server, "put", "-t", "emails", "-p", "10", "--ttr", "30", "one", "two")).split()
    ids += out(run(server, "put", "-t", "emails", stdin=b"\xff raw\r\n")).split()
    lines = json.loads(out(run(server, "put", "--lines", "-t", "nums", "--json", stdin=b"1\n2\n3\n")))
    # Then each printed id is a job with that body, priority and ttr
    with Client(server.address) as c:
        assert [c.peek(int(i)).body for i in ids] == [b"one", b"two", b"\xff raw\r\n"]
        assert c.stats_job(int(ids[0]))["pri"] == 10 and c.stats_job(int(ids[0]))["ttr"] == 30
        assert lines["tube"] == "nums"
        assert [c.peek(i).body for i in lines["ids"]] == [b"1", b"2", b"3"]


def test_peek_shows_stats_and_body_or_raw_bytes(server: ServerProcess) -> None:
    with Client(server.address) as c:
        c.use("t")
        jid = c.put(b"\xff\x01binary", delay=100)
    text = out(run(server, "peek", str(jid)))
    assert "state      delayed" in text and "tube       t" in text
    assert "body (8 bytes):\nb'\\xff\\x01binary'" in text
    assert run(server, "peek", str(jid), "--body").stdout == b"\xff\x01binary"
    doc = json.loads(out(run(server, "peek", "--delayed", "-t", "t", "--json")))
    assert doc["id"] == jid and doc["body_base64"] == "/wFiaW5hcnk="
    missing = run(server, "peek", "--ready", "-t", "t")
    assert missing.returncode == 1 and b"no ready job in the used tube" in missing.stderr
    assert run(server, "peek").returncode == 2  # neither an id nor a state


def test_delete_reports_each_id_and_fails_on_missing(server: ServerProcess) -> None:
    with Client(server.address) as c:
        a, b = c.put(b"a"), c.put(b"b")
    p = run(server, "delete", str(a), "999", str(b))
    assert p.returncode == 1
    assert p.stdout.decode().split("\n")[:2] == [f"deleted {a}", f"deleted {b}"]
    assert b"999" in p.stderr
    doc = json.loads(run(server, "delete", str(a), "--json").stdout)
    assert doc == {"deleted": [], "not_found": [a]}


def test_kick_bound_all_and_jobs(server: ServerProcess) -> None:
    with Client(server.address) as c:
        c.use("k")
        c.watch("k")
        ids = c.put_many([b"1", b"2", b"3", b"4"])
        for _ in ids:
            c.bury(c.reserve(timeout=0))
    assert out(run(server, "kick", "-t", "k")).strip() == "kicked 1 job in tube k"
    assert out(run(server, "kick", "-t", "k", "--job", str(ids[3]))).strip() == f"kicked {ids[3]}"
    assert json.loads(out(run(server, "kick", "-t", "k", "--all", "--json"))) == {"tube": "k", "kicked": 2}
    p = run(server, "kick", "--job", str(ids[0]))
    assert p.returncode == 1 and b"neither buried nor delayed" in p.stderr


def test_kick_in_a_tube_that_does_not_exist_is_not_found(server: ServerProcess) -> None:
    # When kicking in a tube the server does not have, Then it says so and exits 1
    p = run(server, "kick", "--all", "-t", "nosuch")
    assert p.returncode == 1 and b"no tube 'nosuch'" in p.stderr and p.stdout == b""
    # And the kick did not create the tube
    with Client(server.address) as c:
        assert "nosuch" not in c.list_tubes()


def test_stats_table_json_and_prefix_filter(server: ServerProcess) -> None:
    run(server, "put", "x")
    text = out(run(server, "stats"))
    rows = dict(line.split(None, 1) for line in text.splitlines())
    assert rows["current-jobs-ready"] == "1" and rows["draining"] == "false"
    # values start in one column: the table is aligned
    starts = {len(line) - len(line.split(None, 1)[1]) for line in text.splitlines()}
    assert len(starts) == 1
    doc = json.loads(out(run(server, "stats", "--json")))
    assert doc["cmd-put"] == 1 and isinstance(doc["version"], str)
    assert out(run(server, "stats", "cmd-put")).split() == ["cmd-put", "1"]
    assert run(server, "stats", "nosuchkey").returncode == 1


def test_stats_tube_one_many_missing(server: ServerProcess) -> None:
    run(server, "put", "-t", "a", "x")
    one = dict(line.split(None, 1) for line in out(run(server, "stats-tube", "a")).splitlines())
    assert one["name"] == "a" and one["current-jobs-ready"] == "1"
    table = out(run(server, "stats-tube")).splitlines()
    assert table[0].split()[:3] == ["tube", "ready", "urgent"]
    assert [r.split()[:2] for r in table[1:]] == [["default", "0"], ["a", "1"]]
    assert json.loads(out(run(server, "stats-tube", "--json")))["a"]["total-jobs"] == 1
    p = run(server, "stats-tube", "a", "nope")
    assert p.returncode == 1 and b"no such tube: nope" in p.stderr
    assert out(run(server, "list-tubes")).split() == ["default", "a"]
    assert json.loads(out(run(server, "list-tubes", "--json"))) == ["default", "a"]


def test_host_and_port_flags_win_over_the_environment(server: ServerProcess) -> None:
    p = run(None, "list-tubes", "--host", server.host, "--port", str(server.port))
    assert out(p).split() == ["default"]
    assert out(run(None, "list-tubes", "-a", server.address)).split() == ["default"]


REFUSED = "{refused}"  # replaced by a port that refuses connections (the ``held_port`` fixture)


@pytest.mark.parametrize(("args", "code", "message"), [
    (["stats", "--port", REFUSED], 3, b"is the server running?"),
    (["put", "-t", "bad name", "x"], 2, b"invalid tube name 'bad name'"),
    (["put", "-p", "-1", "x"], 2, b"priority -1"),
    (["put", "x" * 70000], 4, b"JOB_TOO_BIG"),
    (["delete"], 2, b"usage: stalkd delete"),
])
def test_errors_are_one_clear_line_and_an_exit_code(server: ServerProcess, args: list[str],
                                                    code: int, message: bytes, held_port: int) -> None:
    args = [str(held_port) if a == REFUSED else a for a in args]
    p = run(server, *args, env_addr="--port" not in args)
    assert p.returncode == code, p.stderr
    assert message in p.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["kick", "3", "--all"], b"give BOUND or --all, not both"),
    (["kick", "2", "--job", "5"], b"give no BOUND or --all with it"),
    (["peek", "4", "--ready"], b"give a job ID or one of"),
    (["put", "--lines", "x"], b"--lines reads stdin"),
])
def test_usage_mistakes_are_caught_before_connecting(args: list[str], message: bytes,
                                                     held_port: int) -> None:
    # nothing listens on this port: a usage error must be reported without trying to connect
    p = run(None, *args, "--port", str(held_port))
    assert p.returncode == 2 and message in p.stderr


@pytest.mark.parametrize("cmd", ["put", "peek", "delete", "kick", "stats", "stats-tube", "list-tubes"])
def test_help_reads_well(cmd: str) -> None:
    p = run(None, cmd, "--help")
    text = out(p)
    assert text.startswith(f"usage: stalkd {cmd}")
    assert "--address" in text and "--tls-ca" in text and "--json" in text and "exit status:" in text

