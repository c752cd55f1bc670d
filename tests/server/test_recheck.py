"""Which open TLS connections a reload no longer admits: pure decisions on contexts loaded
with the test's real CA files and certificates in the form ``getpeercert()`` gives them."""

from __future__ import annotations

import ssl

import pytest

from server.tlsutil import Certs, make_certs
from stalkd.server.recheck import CaIndex, untrusted

NOW = 1_800_000_000.0  # 2027-01-15


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _index(*cafiles: str) -> CaIndex:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for f in cafiles:
        ctx.load_verify_locations(cafile=f)
    return CaIndex(ctx)


def _peer(index: CaIndex, not_after: str = "Jan  1 00:00:00 2030 GMT") -> dict[str, object]:
    """A client certificate of the (first) CA of ``index``, as getpeercert() shows it."""
    (ca,) = index.ctx.get_ca_certs()[:1]
    return {"subject": ((("commonName", "worker-1"),),), "issuer": ca["subject"], "notAfter": not_after}


def test_a_connection_passes_while_its_ca_certificate_stays(certs: Certs) -> None:
    old = _index(certs.ca.cert)
    peer = _peer(old)
    trusted_by = old.issuers(peer)
    assert len(trusted_by) == 1
    assert untrusted(_index(certs.ca.cert, certs.other_ca.cert).held, trusted_by, peer, NOW) is None
    assert "no longer in --tls-client-ca" in (untrusted(_index(certs.other_ca.cert).held, trusted_by, peer, NOW)
                                              or "")
    assert "expired (Jan  1 00:00:00 2020 GMT)" in (
        untrusted(old.held, trusted_by, _peer(old, "Jan  1 00:00:00 2020 GMT"), NOW) or "")


def test_a_ca_made_again_under_the_same_name_is_another_ca(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> None:
    again = make_certs(tmp_path_factory.mktemp("again"))  # same subjects, new keys
    old = _index(certs.ca.cert)
    peer = _peer(old)
    new = _index(again.ca.cert)
    assert new.issuers(peer)  # the same name...
    assert untrusted(new.held, old.issuers(peer), peer, NOW) is not None  # ...not the same CA


def test_a_connection_without_a_certificate_has_nothing_to_check(certs: Certs) -> None:
    assert _index(certs.ca.cert).issuers(None) == frozenset()
    assert untrusted(_index(certs.other_ca.cert).held, frozenset(), None, NOW) is None
