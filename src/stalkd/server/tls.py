"""The server side of TLS: contexts for ``--tls-listen`` and the identity of a client.

Ensures: TLS 1.2 or newer; with a client CA, a client without a certificate signed by it
fails the handshake (no command of it is ever read); a certificate, key or CA file that
cannot be loaded is a :class:`TlsConfigError` naming the file, raised before anything is
swapped, so a bad reload (SIGHUP) leaves the running listeners as they were.
"""

from __future__ import annotations

import ssl
from typing import Any

__all__ = ["TlsConfigError", "server_context", "identity", "TlsFiles"]

# Short attribute names, as ``openssl x509 -nameopt RFC2253`` prints them.
_SHORT = {
    "commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
    "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}  # fmt: skip


class TlsConfigError(ValueError):
    """A TLS file cannot be used; the message names it."""


class TlsFiles:
    """The files a TLS listener is built from (read again on reload)."""

    __slots__ = ("cert", "key", "client_ca")

    def __init__(self, cert: str, key: str | None = None, client_ca: str | None = None) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """A server context from ``files``; raises :class:`TlsConfigError`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"cannot load the TLS certificate {files.cert} "
                             f"(key {files.key or 'in the same file'}): {_why(e)}") from None
    if files.client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=files.client_ca)
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError(f"cannot load client CA certificates from {files.client_ca}: "
                                 f"{_why(e)}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _why(e: BaseException) -> str:
    return (e.strerror if isinstance(e, OSError) and e.strerror else "") or str(e)


def identity(peercert: dict[str, Any] | None) -> str | None:
    """The subject of a verified client certificate in RFC 4514 order (most specific
    first, as ``openssl x509 -noout -subject -nameopt RFC2253`` prints it); None without one.

    >>> identity({"subject": ((("countryName", "FR"),), (("organizationName", "Ex, Inc"),),
    ...                       (("commonName", "worker-1"),))})
    'CN=worker-1,O=Ex\\\\, Inc,C=FR'
    """
    if not peercert or "subject" not in peercert:
        return None
    parts = []
    for rdn in reversed(peercert["subject"]):
        parts.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(parts) or None


def _escape(value: str) -> str:
    out = "".join("\\" + ch if ch in ',+"\\<>;=' else ch for ch in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out
