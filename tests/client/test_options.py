"""One address scheme for every subcommand: the grammar, the shared flags, their precedence."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from stalkd.client._address import Address, TlsParams, parse_address
from stalkd.client._tls import client_context
from stalkd.client.options import add_server_options, server_address


@pytest.mark.parametrize(("text", "expected"), [
    ("tls://q:11400", Address("q", 11400, None, TlsParams())),
    ("tls://q", Address("q", 11300, None, TlsParams())),
    ("tls://[::1]:9?ca=/c.pem&cert=/a%20b.pem&key=/k.pem&name=q.example",
     Address("::1", 9, None, TlsParams("/c.pem", "/a b.pem", "/k.pem", "q.example"))),
    ("tcp://h:5", Address("h", 5)),
])
def test_tls_addresses_parse_and_print_back(text: str, expected: Address) -> None:
    # Given an address as a user writes it, When parsed, Then the parts come out
    got = parse_address(text)
    assert got == expected
    # And its text form parses back to the same value (it travels as a string)
    assert parse_address(str(got)) == got


@pytest.mark.parametrize(("text", "message"), [
    ("tls://q:1?bogus=1", "unknown setting 'bogus'"),
    ("tls://q:1?ca=", "ca= needs a value"),
    ("http://q:1", "unknown scheme"),
    ("tcp://q:1?ca=x", "for tls:// addresses"),
])
def test_bad_tls_addresses_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_address(text)


def test_tls_files_are_checked_before_connecting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="without the client certificate"):
        client_context(TlsParams(key="/k.pem"))
    with pytest.raises(ValueError, match=f"cannot load CA certificates from {tmp_path}/none.pem"):
        client_context(TlsParams(ca=str(tmp_path / "none.pem")))


def _ns(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_server_options(p)
    return p.parse_args(list(argv))


def test_flag_beats_address_query_beats_environment() -> None:
    env = {"STALKD_ADDR": "tls://envhost:1?ca=/q.pem", "STALKD_TLS_CA": "/env-ca.pem",
           "STALKD_TLS_CERT": "/env-cert.pem", "STALKD_TLS_KEY": "/env-key.pem"}
    # the address comes from the environment; its own ca= beats $STALKD_TLS_CA
    a = server_address(_ns(), env=env)
    assert (a.host, a.port) == ("envhost", 1)
    assert a.tls == TlsParams("/q.pem", "/env-cert.pem", "/env-key.pem")
    # a flag beats the query and the environment
    a = server_address(_ns("--tls-ca", "/flag.pem", "--tls-key", "/fk.pem"), env=env)
    assert a.tls == TlsParams("/flag.pem", "/env-cert.pem", "/fk.pem")
    # -a beats $STALKD_ADDR; the deprecated --host/--port still override its parts
    a = server_address(_ns("-a", "h:5", "--port", "7"), env=env)
    assert a == Address("h", 7)


def test_tls_flags_with_a_plain_address_are_refused() -> None:
    with pytest.raises(ValueError, match="--tls-ca given but the address h:5 is not tls://"):
        server_address(_ns("-a", "h:5", "--tls-ca", "/c.pem"), env={})
    # the environment's TLS settings are simply unused for a plain address
    assert server_address(_ns("-a", "h:5"), env={"STALKD_TLS_CA": "/c.pem"}) == Address("h", 5)


def test_default_when_nothing_is_given() -> None:
    assert server_address(_ns(), env={}) == Address()
    assert server_address(_ns(), env={}, default="w:9") == Address("w", 9)
    with pytest.raises(ValueError, match=r"from \$STALKD_ADDR"):
        server_address(_ns(), env={"STALKD_ADDR": "h:x"})
