"""A standby streams over the primary's TLS listener (the ``tls://`` address scheme with its
certificate files); with an ACL only identities with ``replicate = true`` may stream."""

from __future__ import annotations

from pathlib import Path

import stalkd
from server.tlsutil import issue, make_certs, start

from .cluster import snapshot, standby, stats, until


def test_standby_over_tls_needs_the_replicate_right(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    replica = issue(tmp_path, certs.ca, "replica", "/O=stalkd tests/CN=standby-1")
    acl = tmp_path / "acl.toml"
    acl.write_text('[identity."CN=standby-*,O=stalkd tests"]\nreplicate = true\n'
                   '[identity."CN=producer,O=stalkd tests"]\nput = ["*"]\n')
    p = start("--dir", str(tmp_path / "p"), "--tls-listen", "127.0.0.1:0", "--tls-cert", certs.server.cert,
              "--tls-key", certs.server.key, "--tls-client-ca", certs.ca.cert, "--acl", str(acl))
    ok = denied = None
    try:
        with stalkd.Client(p.address) as c:
            jid = c.put(b"over tls")
        base = f"tls://{p.tls}?ca={certs.ca.cert}"
        ok = standby(tmp_path / "s", p, via=f"{base}&cert={replica.cert}&key={replica.key}")
        until(lambda: stats(p).get("standbys") == 1 and stats(ok).get("primary-lag") == 0,
              "the TLS standby to follow", logs=(ok,))
        assert snapshot(ok, jid) == snapshot(p, jid)
        denied = standby(tmp_path / "d", p, via=f"{base}&cert={certs.producer.cert}&key={certs.producer.key}")
        until(lambda: "PERMISSION_DENIED" in denied.log_text(), "the refused standby to say why", logs=(denied,))
        assert "replicate = true" in denied.log_text()
        assert stats(p)["standbys"] == 1
    finally:
        for s in (denied, ok):
            if s is not None:
                s.stop()
        p.stop()


def test_a_tls_listener_without_an_acl_needs_the_secret(tmp_path: Path) -> None:
    """Any certificate passes a TLS listener without an ACL: it proves nothing about replication."""
    certs = make_certs(tmp_path)
    p = start("--dir", str(tmp_path / "p"), "--tls-listen", "127.0.0.1:0", "--tls-cert", certs.server.cert,
              "--tls-key", certs.server.key, "--tls-client-ca", certs.ca.cert)
    denied = None
    try:
        base = f"tls://{p.tls}?ca={certs.ca.cert}"
        denied = standby(tmp_path / "d", p, via=f"{base}&cert={certs.producer.cert}&key={certs.producer.key}")
        until(lambda: "PERMISSION_DENIED" in denied.log_text(), "the refused standby to say why", logs=(denied,))
        with stalkd.Client(p.address) as c:
            assert c.put(b"still primary") > 0
        assert stats(p)["role"] == "primary" and stats(p).get("standbys", 0) == 0
    finally:
        if denied is not None:
            denied.stop()
        p.stop()
