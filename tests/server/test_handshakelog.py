"""Failed handshakes in words, from real handshakes run in memory (two SSLObjects over BIOs,
the server's context as stalkd builds it), and the log's rate limit on the caller's clock."""

from __future__ import annotations

import contextlib
import ssl

import pytest

import stalkd.server.handshakelog
from server.tlsutil import Certs, Pair, make_certs
from stalkd.server.handshakelog import HandshakeLog, reason
from stalkd.server.tls import TlsFiles, server_context
from support import run_doctests


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _server_failure(certs: Certs, client: Pair | None, data: bytes | None = None) -> BaseException:
    """What the server side of a handshake with ``client`` (None: no certificate) raised;
    ``data``: bytes sent instead of a client hello."""
    server = server_context(TlsFiles(certs.server.cert, certs.server.key, certs.ca.cert)).wrap_bio(
        s_in := ssl.MemoryBIO(), s_out := ssl.MemoryBIO(), server_side=True)
    ctx = ssl.create_default_context(cafile=certs.ca.cert)
    if client is not None:
        ctx.load_cert_chain(client.cert, client.key)
    cli = ctx.wrap_bio(c_in := ssl.MemoryBIO(), c_out := ssl.MemoryBIO(), server_hostname="localhost")
    if data is not None:
        s_in.write(data)
    for _ in range(10):
        if data is None:
            with contextlib.suppress(ssl.SSLWantReadError):
                cli.do_handshake()
            s_in.write(c_out.read())
        try:
            server.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as e:
            return e
        c_in.write(s_out.read())
    raise AssertionError("the handshake did not fail")


@pytest.mark.parametrize(("who", "data", "words"), [
    (None, None, "no client certificate"),
    ("stranger", None, "not signed by a CA of --tls-client-ca (unknown CA)"),
    (None, b"stats\r\n" * 10, "not TLS"),
    (None, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not TLS (an HTTP request"),
])
def test_a_failed_handshake_is_told_in_words(certs: Certs, who: str | None, data: bytes | None,
                                            words: str) -> None:
    exc = _server_failure(certs, getattr(certs, who) if who else None, data)
    assert words in reason(exc)


def test_the_log_is_rate_limited_and_counts_what_it_left_out() -> None:
    lines: list[str] = []
    hl = HandshakeLog(burst=3, window=10.0, emit=lines.append)
    for i in range(100):  # a scan: 100 failures in 1 s
        hl.failed(f"10.0.0.{i}:4000", TimeoutError(), now=i / 100)
    assert len(lines) == 3 and hl.failures == 100
    assert lines[0] == "TLS handshake from 10.0.0.0:4000 failed: timed out before it finished"
    hl.failed("10.0.0.200:4000", ConnectionResetError(), now=10.5)
    assert lines[-1] == ("TLS handshake from 10.0.0.200:4000 failed: the client closed the connection "
                         "(and 97 more failed handshakes in the last 10s, not logged one by one)")


def test_docstring_examples() -> None:
    result = run_doctests(stalkd.server.handshakelog)
    assert result.attempted > 0 and result.failed == 0


def test_the_server_logs_a_refused_handshake_with_the_peer_and_the_reason() -> None:
    import socket
    import ssl as ssl_

    from server.tlsutil import secured_flags, shared_certs, start

    certs, _ = shared_certs()
    s = start(*secured_flags())
    try:
        host, _, port = s.tls.rpartition(":")
        ctx = ssl_.create_default_context(cafile=certs.ca.cert)  # no client certificate
        with socket.create_connection((host, int(port)), timeout=30) as raw:
            try:
                with ctx.wrap_socket(raw, server_hostname="localhost") as t:
                    t.sendall(b"stats\r\n")
                    t.recv(100)
            except (ssl_.SSLError, OSError):
                pass
        s.wait_log(r"TLS handshake from 127\.0\.0\.1 failed: .*certificate")
    finally:
        s.stop()
