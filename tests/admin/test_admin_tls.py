"""--admin-tls: the admin endpoint over HTTPS with the TLS listeners' certificate; with a client
CA and an ACL only identities with ``admin = true`` may use the API (real handshakes)."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from admin.adminproc import start_admin_server
from server.tlsutil import Certs, make_certs

ACL = """
[identity."CN=producer,O=stalkd tests"]
put = ["*"]

[identity."CN=ops,O=stalkd tests"]
admin = true
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _get(url: str, certs: Certs, who: str | None) -> int:
    ctx = ssl.create_default_context(cafile=certs.ca.cert)
    if who is not None:
        pair = getattr(certs, who)
        ctx.load_cert_chain(pair.cert, pair.key)
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=20) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        return 0  # the handshake was refused


def test_https_with_client_certificates_and_acl(certs: Certs, tmp_path: Path) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    srv = start_admin_server("--admin-tls", "--tls-cert", certs.server.cert, "--tls-key",
                             certs.server.key, "--tls-client-ca", certs.ca.cert, "--acl", str(acl))
    try:
        assert srv.admin.startswith("https://")
        url = srv.admin.replace("127.0.0.1", "localhost")  # the certificate names localhost
        assert _get(url + "/api/v1/overview", certs, "ops") == 200
        assert _get(url + "/api/v1/overview", certs, "producer") == 403  # no admin = true
        assert _get(url + "/api/v1/overview", certs, None) == 0  # no certificate: no handshake
        assert _get(url + "/api/v1/overview", certs, "stranger") == 0  # another CA
    finally:
        srv.stop()


def test_cli_reaches_an_https_endpoint_with_the_shared_tls_options(certs: Certs, tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    srv = start_admin_server("--admin-tls", "--tls-cert", certs.server.cert, "--tls-key",
                             certs.server.key, "--tls-client-ca", certs.ca.cert)
    try:
        url = srv.admin.replace("127.0.0.1", "localhost")
        env = {k: v for k, v in os.environ.items() if not k.startswith("STALKD_")}
        base = [sys.executable, "-m", "stalkd.cli", "tubes", "--json", "--admin", url,
                "--tls-ca", certs.ca.cert]
        ok = subprocess.run([*base, "--tls-cert", certs.ops.cert, "--tls-key", certs.ops.key],
                            capture_output=True, text=True, timeout=60, env=env)
        assert ok.returncode == 0, ok.stderr
        assert [t["name"] for t in json.loads(ok.stdout)] == ["default"]
        refused = subprocess.run(base, capture_output=True, text=True, timeout=60, env=env)
        assert refused.returncode == 3 and "cannot reach" in refused.stderr  # no client certificate
    finally:
        srv.stop()
