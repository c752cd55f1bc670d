"""The client side of TLS: an ``ssl.SSLContext`` built from a ``tls://`` address's settings.

Ensures: TLS 1.2 or newer; the server's certificate is always verified (against ``ca``, or
the system's trust store) and must name the host connected to (or ``name``); a missing or
unreadable file is a ``ValueError`` naming the file, before any connection is made.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

from stalkd.client._address import Address, TlsParams

__all__ = ["client_context", "server_hostname", "wrap_socket", "connection_kwargs"]


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
