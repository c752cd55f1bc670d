"""The ACL as a pure policy: table-driven decisions, the file's errors, the network warning."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from stalkd.engine import commands as C
from stalkd.server.acl import Acl, AclError, ConnPolicy, load_acl
from stalkd.server.config import Config
from stalkd.server.listen import Listener
from stalkd.server.listeners import Endpoints

ACL = Acl.from_toml({
    "identity": {
        "CN=p,O=x": {"put": ["emails", "reports.*"], "watch": ["emails"]},
        "CN=worker-*,O=x": {"watch": ["emails", "default"]},
        "CN=ops,O=x": {"put": ["*"], "watch": ["*"], "admin": True},
    },
    "default": {"watch": ["public"]},
})
JOBS = {1: "emails", 2: "payroll"}  # job id -> tube


def policy(identity: str | None) -> ConnPolicy:
    return ConnPolicy(lambda: ACL, identity, JOBS.get)


PUT = C.Put(0, 0, 60, b"x")


@pytest.mark.parametrize(("identity", "steps"), [
    # (command, admitted?) in order on one connection
    ("CN=p,O=x", [(PUT, False), (C.Use("emails"), True), (PUT, True), (C.Use("reports.q"), True),
                  (PUT, True), (C.Use("reportsX"), True), (PUT, False)]),
    ("CN=p,O=x", [(C.Reserve(), False), (C.Watch("payroll"), False), (C.Watch("emails"), True),
                  (C.ReserveWithTimeout(0), False), (C.Ignore("default"), True), (C.Reserve(), True)]),
    ("CN=p,O=x", [(C.Delete(1), True), (C.Delete(2), False), (C.Delete(99), True),
                  (C.Peek(2), False), (C.StatsJob(2), False), (C.Touch(1), True),
                  (C.Release(2, 0, 0), False), (C.Bury(2, 0), False), (C.ReserveJob(2), False)]),
    ("CN=p,O=x", [(C.Kick(5), False), (C.KickJob(1), False), (C.PauseTube("emails", 1), False),
                  (C.Stats(), True), (C.ListTubes(), True), (C.StatsTube("payroll"), True),
                  (C.PeekReady(), False), (C.Use("emails"), True), (C.PeekBuried(), True)]),
    ("CN=worker-7,O=x", [(C.Reserve(), True), (PUT, False), (C.Delete(2), False)]),
    ("CN=ops,O=x", [(C.Kick(5), True), (C.PauseTube("a", 1), True), (C.Peek(2), True), (PUT, True)]),
    (None, [(C.Reserve(), False), (C.Watch("public"), True), (C.Ignore("default"), True),
            (C.Reserve(), True), (PUT, False), (C.Kick(1), False)]),
    ("CN=eve", [(C.Watch("public"), True), (C.Watch("emails"), False)]),
    # a put the parser already refused (too big) reaches the engine for its usual reply
    ("CN=eve", [(C.Put(0, 0, 60, b"", error="JOB_TOO_BIG"), True)]),
])
def test_decisions(identity: str | None, steps: list[tuple[object, bool]]) -> None:
    p = policy(identity)
    assert [(cmd, p.admits(cmd)) for cmd, _ in steps] == steps


def test_ignoring_the_last_watched_tube_keeps_it() -> None:
    p = policy("CN=ops,O=x")
    assert p.admits(C.Ignore("default"))  # the engine answers NOT_IGNORED; still watched here
    assert p.admits(C.Reserve())
    q = policy("CN=p,O=x")
    assert q.admits(C.Ignore("default")) and not q.admits(C.Reserve())


def test_admin_check_for_the_admin_api() -> None:
    assert ACL.may_admin("CN=ops,O=x") and not ACL.may_admin("CN=p,O=x") and not ACL.may_admin(None)


@pytest.mark.parametrize(("text", "message"), [
    ("[identity.\"CN=a\"]\nput = \"emails\"\n", "put must be a list"),
    ("[identity.\"CN=a\"]\nadmin = 1\n", "admin must be true or false"),
    ("[identity.\"CN=a\"]\nreserve = []\n", r"unknown key\(s\) \['reserve'\]"),
    ("[users]\n", r"unknown section\(s\) \['users'\]"),
    ("[identity\n", "not valid TOML"),
])
def test_bad_files_name_the_file_and_the_entry(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "acl.toml"
    f.write_text(text)
    with pytest.raises(AclError, match=message) as info:
        load_acl(str(f))
    assert str(f) in str(info.value)
    with pytest.raises(AclError, match="cannot read the ACL file"):
        load_acl(str(tmp_path / "missing.toml"))


def _bound(host: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((host, 0))  # bound, never listening: nothing can connect
    return s


@pytest.mark.parametrize(("host", "ok_flag", "warned"), [
    ("0.0.0.0", False, True), ("0.0.0.0", True, False), ("127.0.0.1", False, False),
])
def test_a_plain_listener_on_a_network_address_is_warned_about(host: str, ok_flag: bool, warned: bool) -> None:
    sock = _bound(host)
    try:
        eps = Endpoints(Config(plain_network_ok=ok_flag), [Listener("plain", sock)])
        text = " ".join(eps.warnings())
        assert bool(text) == warned
        if warned:
            assert "read, delete and kick every job" in text and "--tls-listen" in text
            assert "--plain-network-ok" in text
    finally:
        sock.close()
