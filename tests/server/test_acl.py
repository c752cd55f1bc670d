"""The ACL as a pure policy: table-driven decisions, the file's errors, the network warning."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import stalkd.server.acl
from stalkd.protocol import commands as C
from stalkd.server.acl import Acl, AclError, ConnPolicy, dn_matches, load_acl
from stalkd.server.config import Config
from stalkd.server.listen import Listener
from stalkd.server.listeners import Endpoints
from support import run_doctests

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
                  (C.Stats(), True), (C.ListTubes(), True), (C.StatsTube("payroll"), False),
                  (C.StatsTube("emails"), True),
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


ROLES = Acl.from_toml({
    "identity": {
        "CN=producer,O=Example": {"producer": ["emails", "reports.*"]},
        "CN=worker-*,O=Example": {"worker": ["emails"]},
        "CN=other,O=Example": {"worker": ["payroll"], "producer": ["payroll"]},
        "CN=ops,O=Example": {"admin": True},
    },
})
ROLE_JOBS = {1: "emails", 2: "payroll", 3: "stalkd.failed", 4: "stalkd.cancel.1", 5: "stalkd.cancel.2",
             6: "stalkd.cancel.wake.abc"}


def role_policy(identity: str | None) -> ConnPolicy:
    return ConnPolicy(lambda: ROLES, identity, ROLE_JOBS.get)


def _using(tube: str) -> list[tuple[object, bool]]:
    return [(C.Use(tube), True)]


@pytest.mark.parametrize(("identity", "steps"), [
    # a worker: its tubes, its dead letters (put only), the cancel tubes of its jobs, keys, limits
    ("CN=worker-1,O=Example", [
        (C.Watch("emails"), True), (C.Ignore("default"), True), (C.Reserve(), True),
        (C.Release(1, 0, 0), True), (C.Bury(1, 0), True), (C.KickJob(1), True), (C.ResultPut(1, 60, b"r"), True),
        (C.Watch("payroll"), False), (C.Delete(2), False), (C.ResultGet(2), False), (C.KickJob(2), False),
        *_using("stalkd.failed"), (PUT, True), (C.Watch("stalkd.failed"), False), (C.Peek(3), False),
        (C.Watch("stalkd.cancel.1"), True), (C.Watch("stalkd.cancel.2"), False),
        (C.Watch("stalkd.cancel.99"), True),  # its job is gone: only markers naming an id are left
        (C.Watch("stalkd.cancel.idle"), True), (C.Watch("stalkd.cancel.wake.abc"), True), (C.Reserve(), True), (C.Delete(4), True), (C.Delete(5), False),
        *_using("stalkd.key.ab12"), (PUT, True), (C.PeekReady(), True),
        (C.Watch("stalkd.limit.api"), True), *_using("stalkd.limit.api.init"), (PUT, True),
        (C.Watch("stalkd.workers.h.1.ab"), True), *_using("stalkd.workers.h.1.ab"), (PUT, True),
        *_using("emails"), (PUT, True), *_using("payroll"), (PUT, False),
        (C.Kick(1), False), (C.PauseTube("emails", 1), False),
        (C.StatsTube("emails"), True), (C.StatsTube("payroll"), False), (C.StatsTube("stalkd.failed"), True),
    ]),
    # a producer: puts, follows its jobs (status, result, delete), asks a running one to stop
    ("CN=producer,O=Example", [
        *_using("reports.daily"), (PUT, True), *_using("emails"), (PUT, True), (C.PeekReady(), True),
        (C.StatsJob(1), True), (C.ResultGet(1), True), (C.Delete(1), True),
        (C.StatsJob(2), False), (C.ResultGet(2), False), (C.Delete(2), False),
        (C.Watch("emails"), False), (C.Release(1, 0, 0), False), (C.ResultPut(1, 60, b"forged"), False),
        (C.KickJob(1), False),
        *_using("stalkd.cancel.1"), (PUT, True), *_using("stalkd.cancel.2"), (PUT, False),
        *_using("stalkd.cancel.wake.abc"), (PUT, True), (C.StatsTube("stalkd.cancel.wake.abc"), True),
        (C.Delete(4), True), (C.Delete(6), True), (C.Delete(5), False),
        *_using("stalkd.failed"), (PUT, False), *_using("stalkd.wait.ab12"), (PUT, True),
        (C.Watch("stalkd.cancel.idle"), False),
    ]),
    ("CN=ops,O=Example", [(C.Kick(5), True), (C.Watch("stalkd.failed"), True), (C.Peek(2), True),
                          (C.Delete(5), True), *_using("payroll"), (PUT, True)]),
    # a subject that matches no entry: nothing but what changes and reveals nothing of others
    ("CN=eve", [(C.ListTubes(), True), (C.Stats(), True), (C.StatsTube("emails"), False),
                (C.ResultGet(1), False), (C.ResultPut(1, 60, b"x"), False), (C.Watch("stalkd.cancel.1"), False),
                *_using("stalkd.failed"), (PUT, False), *_using("stalkd.key.ab12"), (PUT, False)]),
])
def test_roles_grant_what_they_need_underneath(identity: str, steps: list[tuple[object, bool]]) -> None:
    p = role_policy(identity)
    assert [(cmd, p.admits(cmd)) for cmd, _ in steps] == steps


@pytest.mark.parametrize(("identity", "shown"), [
    ("CN=worker-1,O=Example", ["emails", "stalkd.cancel.wake.abc", "stalkd.failed"]),
    ("CN=producer,O=Example", ["emails", "reports.x", "stalkd.cancel.wake.abc"]),
    ("CN=eve", []),
    ("CN=ops,O=Example", ["default", "emails", "payroll", "reports.x", "stalkd.cancel.wake.abc", "stalkd.failed"]),
])
def test_list_tubes_shows_only_the_tubes_an_identity_may_see(identity: str, shown: list[str]) -> None:
    p = role_policy(identity)
    tubes = ["default", "emails", "payroll", "reports.x", "stalkd.cancel.wake.abc", "stalkd.failed"]
    assert [t for t in tubes if p.shows(t)] == shown


@pytest.mark.parametrize(("subject", "pattern", "matches"), [
    ("CN=worker-1,O=Example", "CN=worker-*,O=Example", True),
    # the certificate /O=Example/O=Partner/CN=worker-evil: a glob never spans a ","
    ("CN=worker-evil,O=Partner,O=Example", "CN=worker-*,O=Example", False),
    ("CN=worker-1,O=Example", "CN=*", False),
    ("CN=a\\,O=Example,O=Example", "CN=*,O=Example", True),  # the escaped "," is the CN's
    ("CN=a\\,b,O=Example", "CN=a*,O=Example", True),
    ("CN=a\\,O=Example,O=Example", "CN=*,O=Example,O=Example", False),
    # reordered: RDNs match in order
    ("O=Example,CN=worker-1", "CN=worker-*,O=Example", False),
    # multi-valued RDNs: their values in any order, a glob never spans a "+"
    ("CN=worker-1+UID=7,O=Example", "CN=worker-*,O=Example", False),
    ("UID=7+CN=worker-1,O=Example", "CN=worker-*+UID=7,O=Example", True),
    ("CN=worker-1+UID=8,O=Example", "CN=worker-*+UID=7,O=Example", False),
    ("CN=worker-1+UID=7,O=Example", "CN=*", False),
])
def test_identity_patterns_match_rdn_by_rdn(subject: str, pattern: str, matches: bool) -> None:
    assert dn_matches(subject, pattern) is matches
    acl = Acl.from_toml({"identity": {pattern: {"worker": ["emails"]}}})
    assert acl.rules_for(subject).may_watch("emails") is matches


def test_the_old_verbs_keep_working_and_grant_nothing_underneath() -> None:
    p = policy("CN=worker-7,O=x")  # watch = ["emails", "default"]
    assert p.admits(C.Watch("emails")) and p.admits(C.Reserve())
    assert not p.admits(C.Watch("stalkd.cancel.1")) and p.admits(C.Use("stalkd.failed"))
    assert not p.admits(PUT)


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


def test_docstring_examples() -> None:
    result = run_doctests(stalkd.server.acl)
    assert result.attempted > 0 and result.failed == 0
