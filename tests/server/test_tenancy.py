"""Tenants on one server (issue 31): results belong to their job's tube, listings show an
identity only its tubes, results are bounded per identity, and identity patterns match per RDN.
Real handshakes against stalkd started as a process on port 0, certificates made by openssl."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.tlsutil import Certs, Pair, Stalkd, issue, make_certs, start
from stalkd.client import AsyncClient, Client, errors
from support import require_binary, wait_until

ACL = """
[identity."CN=producer,O=stalkd tests"]
producer = ["emails"]

[identity."CN=worker-*,O=stalkd tests"]
worker = ["emails"]

[identity."CN=ops,O=stalkd tests"]
admin = true
"""


class Tenants:
    def __init__(self, certs: Certs, eve: Pair, worker: Pair, evil: Pair) -> None:
        self.certs, self.eve, self.worker, self.evil = certs, eve, worker, evil


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Tenants:
    d = tmp_path_factory.mktemp("certs")
    certs = make_certs(d)
    return Tenants(certs, issue(d, certs.ca, "eve", "/O=stalkd tests/CN=eve"),
                   issue(d, certs.ca, "worker-1", "/O=stalkd tests/CN=worker-1"),
                   # the issue's certificate: an extra RDN the pattern's "*" must not swallow
                   issue(d, certs.ca, "worker-evil", "/O=stalkd tests/O=Partner/CN=worker-evil"))


def _serve(t: Tenants, tmp_path: Path, *more: str) -> Stalkd:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    c = t.certs
    return start("--tls-listen", "127.0.0.1:0", "--tls-cert", c.server.cert, "--tls-key", c.server.key,
                 "--tls-client-ca", c.ca.cert, "--acl", str(acl), *more)


@pytest.fixture
def server(tenants: Tenants, tmp_path: Path) -> Iterator[Stalkd]:
    s = _serve(tenants, tmp_path)
    yield s
    s.stop()


def _as(s: Stalkd, t: Tenants, pair: Pair) -> Client:
    return Client(f"tls://{s.tls}?ca={t.certs.ca.cert}&cert={pair.cert}&key={pair.key}")


def _finished_with_result(s: Stalkd, t: Tenants, tube: str, result: bytes) -> int:
    """A job of ``tube`` run by ops: reserved, its result stored, then deleted."""
    with _as(s, t, t.certs.ops) as ops:
        ops.use(tube)
        jid = ops.put(b"payslip")
        ops.reserve_job(jid)
        ops.result_put(jid, 600, result)
        ops.delete(jid)
    return jid


def test_a_result_stays_its_tubes_after_the_job_is_gone(server: Stalkd, tenants: Tenants) -> None:
    jid = _finished_with_result(server, tenants, "payroll", b"salary")
    for who in (tenants.eve, tenants.certs.producer, tenants.worker):
        with _as(server, tenants, who) as c:
            with pytest.raises(errors.PermissionDenied):
                c.result_get(jid)
            with pytest.raises(errors.PermissionDenied):
                c.result_put(jid, 99_999_999, b"forged")
    with _as(server, tenants, tenants.certs.ops) as ops:
        assert ops.result_get(jid) == b"salary"
    # the tube's own producer reads its result; a worker of another tube cannot forge it
    mine = _finished_with_result(server, tenants, "emails", b"sent")
    with _as(server, tenants, tenants.certs.producer) as p:
        assert p.result_get(mine) == b"sent"
        with pytest.raises(errors.PermissionDenied):
            p.result_put(mine, 60, b"forged")
    with _as(server, tenants, tenants.worker) as w, pytest.raises(errors.NotFound):
        w.result_put(mine, 60, b"forged")  # it holds no job of emails
    with _as(server, tenants, tenants.certs.ops) as ops:
        assert ops.result_get(mine) == b"sent"


def test_listings_show_an_identity_only_its_tubes(server: Stalkd, tenants: Tenants) -> None:
    with _as(server, tenants, tenants.certs.ops) as ops:
        for tube in ("emails", "payroll", "stalkd.failed"):
            ops.use(tube)
            ops.put(b"x")
        every = set(ops.list_tubes())
    assert {"emails", "payroll", "stalkd.failed", "default"} <= every
    with _as(server, tenants, tenants.eve) as eve:
        assert eve.list_tubes() == []
        with pytest.raises(errors.PermissionDenied):
            eve.stats_tube("payroll")
        with pytest.raises(errors.PermissionDenied):
            eve.stats_tube("no-such-tube")  # the same answer: existence is not shown either
        assert int(eve.stats()["current-jobs-ready"]) == 3  # server-wide counts, as beanstalkd's
    with _as(server, tenants, tenants.certs.producer) as p:
        assert p.list_tubes() == ["emails"]
        assert int(p.stats_tube("emails")["current-jobs-ready"]) == 1
    with _as(server, tenants, tenants.worker) as w:
        assert sorted(w.list_tubes()) == ["emails", "stalkd.failed"]


def test_a_pattern_never_spans_an_rdn(server: Stalkd, tenants: Tenants) -> None:
    with _as(server, tenants, tenants.certs.producer) as p:
        p.use("emails")
        p.put(b"mail")
    with _as(server, tenants, tenants.evil) as evil, pytest.raises(errors.PermissionDenied):
        evil.watch("emails")
    with _as(server, tenants, tenants.worker) as w:
        w.watch("emails")
        w.ignore("default")
        assert w.reserve(timeout=0).body == b"mail"


def test_results_per_identity_are_bounded_with_a_clear_error(tenants: Tenants, tmp_path: Path) -> None:
    s = _serve(tenants, tmp_path, "--max-results", "2", "--max-result-ttl", "3600")
    try:
        with _as(s, tenants, tenants.certs.producer) as p:
            p.use("emails")
            ids = [p.put(b"j") for _ in range(4)]
        with _as(s, tenants, tenants.worker) as w:
            w.watch("emails")
            w.ignore("default")
            held = [w.reserve(timeout=0).id for _ in ids]
            w.result_put(held[0], 60, b"a")
            w.result_put(held[1], 60, b"b")
            with pytest.raises(errors.ResultLimit, match="--max-results"):
                w.result_put(held[2], 60, b"c")
            with pytest.raises(errors.ResultLimit):
                w.result_put(held[3], 3601, b"d")
            stats = w.stats()
            assert (stats["max-results"], stats["max-result-ttl"], stats["current-results"]) == (2, 3600, 2)
        with _as(s, tenants, tenants.certs.ops) as ops:  # another identity is not crowded out
            ops.use("emails")
            jid = ops.put(b"x")
            ops.reserve_job(jid)
            ops.result_put(jid, 60, b"mine")
    finally:
        s.stop()


def _expired(d: Path, ca: Pair) -> Pair:
    """A client certificate of ``ca`` that expired yesterday (issued under faketime)."""
    require_binary("faketime")
    pair = Pair(str(d / "expired.pem"), str(d / "expired.key"))
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/O=stalkd tests/CN=producer", "-keyout", pair.key, "-out", str(d / "expired.csr")],
                   check=True, capture_output=True, timeout=60)
    (d / "expired.ext").write_text("extendedKeyUsage=clientAuth\n")
    subprocess.run(["faketime", "-f", "-3d", "openssl", "x509", "-req", "-in", str(d / "expired.csr"),
                    "-CA", ca.cert, "-CAkey", ca.key, "-set_serial", "77", "-days", "1",
                    "-extfile", str(d / "expired.ext"), "-out", pair.cert],
                   check=True, capture_output=True, timeout=60)
    return pair


@pytest.mark.parametrize(("who", "extra", "cause"), [
    (None, "", "requires a client certificate and none was given"),
    ("stranger", "", "not signed by a CA the server trusts"),
    ("expired", "", "has expired"),
    ("producer", "&name=other.example", "name mismatch"),
    ("unknown-ca", "", r"not signed by a CA in the CA file .*other-ca\.pem \(unknown CA\)"),
])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_refused_handshake_names_its_likely_cause(server: Stalkd, tenants: Tenants, tmp_path: Path,
                                                     who: str | None, extra: str, cause: str,
                                                     flavour: str) -> None:
    c = tenants.certs
    ca = c.other_ca.cert if who == "unknown-ca" else c.ca.cert
    pairs = {"stranger": c.stranger, "producer": c.producer, "unknown-ca": c.producer}
    pair = _expired(tmp_path, c.ca) if who == "expired" else pairs.get(who or "")
    address = f"tls://{server.tls}?ca={ca}{extra}" + (f"&cert={pair.cert}&key={pair.key}" if pair else "")

    async def run() -> None:
        async with AsyncClient(address) as ac:
            await ac.stats()

    with pytest.raises(errors.ClientConnectionError, match=cause):
        if flavour == "sync":
            with Client(address) as cl:
                cl.stats()
        else:
            asyncio.run(run())


def test_a_reload_closes_the_connections_that_no_longer_pass(tenants: Tenants, tmp_path: Path) -> None:
    c = tenants.certs
    ca = tmp_path / "client-ca.pem"
    ca.write_text(Path(c.ca.cert).read_text())
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    s = start("--tls-listen", "127.0.0.1:0", "--tls-cert", c.server.cert, "--tls-key", c.server.key,
              "--tls-client-ca", str(ca), "--acl", str(acl))
    try:
        w, p = _as(s, tenants, tenants.worker), _as(s, tenants, c.producer)
        w.watch("emails")
        w.ignore("default")
        p.use("emails")
        jid = p.put(b"held")
        assert w.reserve(timeout=0).id == jid
        # the ACL drops the worker: its connection goes, and the job it held is ready again
        acl.write_text(ACL.replace('worker = ["emails"]', 'worker = ["reports"]'))
        s.proc.send_signal(signal.SIGHUP)
        s.wait_log(r"SIGHUP: closing conn \d+ from \S+ as CN=worker-1,O=stalkd tests: the ACL no longer "
                   r"lets it watch emails")
        with pytest.raises(errors.ClientConnectionError):
            w.stats()
        # the server releases its job as the close completes
        wait_until(lambda: p.stats_job(jid)["state"] == "ready", "the closed worker's job released")
        assert p.put(b"still served") > jid
        # another client CA: the producer's certificate no longer verifies, so it goes too
        ca.write_text(Path(c.other_ca.cert).read_text())
        s.proc.send_signal(signal.SIGHUP)
        s.wait_log(r"SIGHUP: closing conn \d+ from \S+ as CN=producer,O=stalkd tests: its certificate's CA "
                   r"is no longer in --tls-client-ca")
        with pytest.raises(errors.ClientConnectionError):
            p.stats()
        w.close()
        p.close()
    finally:
        s.stop()
