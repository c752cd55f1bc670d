"""The client side of TLS: an ``ssl.SSLContext`` built from a ``tls://`` address's settings.

Ensures: TLS 1.2 or newer; the server's certificate is always verified (against ``ca``, or
the system's trust store) and must name the host connected to (or ``name``); a missing or
unreadable file is a ``ValueError`` naming the file, before any connection is made. A refused
handshake is explained (``why_refused``): no client certificate, an unknown CA, an expired
certificate, a name mismatch. With TLS 1.3 the server checks the client's certificate after
the client's side of the handshake is done, so its refusal shows as the connection closing
before the first reply: the transports ask ``why_refused`` then too.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

from stalkd.client._address import Address, TlsParams

__all__ = ["client_context", "server_hostname", "wrap_socket", "connection_kwargs", "why_refused",
           "handshake_refused"]

# OpenSSL's verify codes (X509_V_ERR_*) for the server's certificate, in words
_UNKNOWN_CA = frozenset({2, 18, 19, 20, 21})
_EXPIRED, _NOT_YET, _HOSTNAME, _IP = 10, 9, 62, 64
# alerts a server sends when it refuses the client's certificate
_ALERT_NO_CERT = ("TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_HANDSHAKE_FAILURE")
_ALERT_UNKNOWN_CA = ("TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE")
_ALERT_EXPIRED = ("SSLV3_ALERT_CERTIFICATE_EXPIRED",)


def _expired(cert: str) -> str | None:
    """When the certificate in ``cert`` expired (None: it has not, or it cannot be read)."""
    import time

    try:
        after = ssl._ssl._test_decode_cert(cert)["notAfter"]  # type: ignore[attr-defined]  # noqa: SLF001
        return str(after) if ssl.cert_time_to_seconds(after) < time.time() else None
    except (AttributeError, KeyError, OSError, ValueError, ssl.SSLError):
        return None


def why_refused(address: Address, exc: BaseException | None = None) -> str:
    """The likely cause of a TLS connection to ``address`` refused during or right after its
    handshake (``exc``: what the client saw, None for a bare close), in words.

    >>> why_refused(Address("q", 11400, tls=TlsParams(ca="ca.pem")))
    'the server requires a client certificate and none was given (cert=FILE&key=FILE in the address, --tls-cert/--tls-key, or STALKD_TLS_CERT/STALKD_TLS_KEY)'
    """
    tls = address.tls or TlsParams()
    code = getattr(exc, "verify_code", None)
    if isinstance(exc, ssl.SSLCertVerificationError) and code is not None:
        if code in (_HOSTNAME, _IP):
            return (f"the server's certificate does not name {server_hostname(address)!r} (name mismatch): "
                    f"connect by a name it carries, or give it as name=... in the address")
        if code == _EXPIRED:
            return "the server's certificate has expired"
        if code == _NOT_YET:
            return "the server's certificate is not valid yet (check both clocks)"
        if code in _UNKNOWN_CA:
            trusted = f"the CA file {tls.ca}" if tls.ca else "the system's trust store"
            return f"the server's certificate is not signed by a CA in {trusted} (unknown CA)"
        return f"the server's certificate was refused: {getattr(exc, 'verify_message', exc)}"
    reason = str(getattr(exc, "reason", "") or "")
    if tls.cert is None or reason in _ALERT_NO_CERT:
        return ("the server requires a client certificate and none was given (cert=FILE&key=FILE "
                "in the address, --tls-cert/--tls-key, or STALKD_TLS_CERT/STALKD_TLS_KEY)")
    expired = _expired(tls.cert)
    if expired is not None or reason in _ALERT_EXPIRED:
        return f"the client certificate {tls.cert} has expired{f' ({expired})' if expired else ''}"
    return (f"the server did not accept the client certificate {tls.cert}: most likely it is not "
            f"signed by a CA the server trusts (its --tls-client-ca: unknown CA)")


def client_context(params: TlsParams) -> ssl.SSLContext:
    """A context verifying the server, presenting ``params.cert`` when given.

    >>> client_context(TlsParams()).minimum_version >= ssl.TLSVersion.TLSv1_2
    True
    """
    if params.key is not None and params.cert is None:
        raise ValueError(f"a TLS key ({params.key}) without the client certificate it belongs to")
    try:
        ctx = ssl.create_default_context(cafile=params.ca)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"cannot load CA certificates from {params.ca}: {e}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if params.cert is not None:
        try:
            ctx.load_cert_chain(params.cert, params.key)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"cannot load the client certificate {params.cert} "
                             f"(key {params.key or 'in the same file'}): {e}") from None
    return ctx


def server_hostname(address: Address) -> str:
    """The name the server's certificate must show."""
    assert address.tls is not None
    return address.tls.name or address.host


def wrap_socket(sock: socket.socket, address: Address) -> socket.socket:
    """``sock`` itself for a plain address; else the TLS socket after a completed handshake
    (an ``ssl.SSLError``, an ``OSError``, if the server is refused or refuses us)."""
    if address.tls is None:
        return sock
    try:
        return client_context(address.tls).wrap_socket(sock, server_hostname=server_hostname(address))
    except BaseException:
        sock.close()
        raise


def connection_kwargs(address: Address) -> dict[str, Any]:
    """Keyword arguments for ``loop.create_connection`` (``ssl``/``server_hostname``)."""
    if address.tls is None:
        return {}
    return {"ssl": client_context(address.tls), "server_hostname": server_hostname(address)}


def handshake_refused(address: Address, exc: BaseException) -> str:
    """The message of a connection error for a handshake that failed with ``exc``."""
    return f"TLS handshake with {address} refused: {why_refused(address, exc)} ({exc})"
