"""The server address and TLS options every ``stalkd`` client subcommand shares.

One helper adds them to a parser and one turns the parsed values into an :class:`Address`,
so ``put``, ``peek``, ``worker``, ``failed``, ``retry`` and the admin commands read the same
flags and environment variables the same way:

    -a/--address ADDR   $STALKD_ADDR       host:port, unix:/path or tls://host:port
    --tls-ca FILE       $STALKD_TLS_CA     CA certificate(s) that sign the server's certificate
    --tls-cert FILE     $STALKD_TLS_CERT   this client's certificate (mutual TLS)
    --tls-key FILE      $STALKD_TLS_KEY    its private key
    --host, --port                         deprecated: still accepted, override ADDR's parts

Precedence: a flag wins over the same setting written in the address's query, which wins over
the environment. The TLS settings apply to ``tls://`` addresses; given as flags with a plain
address they are a usage error (a forgotten ``tls://`` would otherwise send jobs in clear).

Example::

    p = argparse.ArgumentParser(prog="stalkd thing")
    add_server_options(p)
    ns = p.parse_args(argv)
    address = server_address(ns)          # ValueError with a message fit for the user
    with Client(str(address)) as c: ...
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from stalkd.client._address import DEFAULT_HOST, DEFAULT_PORT, Address, TlsParams, parse_address

__all__ = ["add_server_options", "server_address", "ENV_ADDR", "ENV_TLS"]

ENV_ADDR = "STALKD_ADDR"
# option dest -> environment variable
ENV_TLS = {"tls_ca": "STALKD_TLS_CA", "tls_cert": "STALKD_TLS_CERT", "tls_key": "STALKD_TLS_KEY"}


def add_server_options(p: argparse.ArgumentParser, *, default: str | None = None) -> None:
    """Add ``-a/--address``, ``--tls-ca/--tls-cert/--tls-key`` and the deprecated
    ``--host/--port`` to ``p``, in a group of their own. ``default`` names what is used when
    neither ``-a`` nor ``$STALKD_ADDR`` is given (for the help text only)."""
    g = p.add_argument_group("server (one address scheme for every stalkd command)")
    g.add_argument("-a", "--address", metavar="ADDR",
                   help=f"host:port, unix:/path or tls://host:port (default: ${ENV_ADDR}, else "
                        f"{default or f'{DEFAULT_HOST}:{DEFAULT_PORT}'})")
    g.add_argument("--tls-ca", metavar="FILE",
                   help="CA certificate(s) to verify a tls:// server with (default: "
                        "$STALKD_TLS_CA, else the system's trust store)")
    g.add_argument("--tls-cert", metavar="FILE",
                   help="client certificate, for servers that require one (default: $STALKD_TLS_CERT)")
    g.add_argument("--tls-key", metavar="FILE",
                   help="private key of --tls-cert (default: $STALKD_TLS_KEY)")
    g.add_argument("--host", help="deprecated: use -a HOST:PORT")
    g.add_argument("--port", type=int, help="deprecated: use -a HOST:PORT")


def server_address(ns: argparse.Namespace, *, default: str | None = None,
                   env: Mapping[str, str] | None = None) -> Address:
    """The address the parsed options ask for: ``-a``, else ``$STALKD_ADDR``, else ``default``
    (else 127.0.0.1:11300). Raises ``ValueError`` naming where a bad value came from.

    >>> ns = argparse.Namespace(address="tls://q:1", tls_ca="ca.pem", tls_cert=None,
    ...                         tls_key=None, host=None, port=None)
    >>> str(server_address(ns, env={}))
    'tls://q:1?ca=ca.pem'
    """
    env = os.environ if env is None else env
    text = ns.address or env.get(ENV_ADDR) or default
    source = "-a" if ns.address else f"${ENV_ADDR}" if env.get(ENV_ADDR) else "the default"
    flags = TlsParams(ns.tls_ca, ns.tls_cert, ns.tls_key)
    from_env = TlsParams(*(env.get(v) or None for v in ENV_TLS.values()))
    try:
        addr = parse_address(text, ns.host, ns.port, tls=flags)
        if addr.tls is None:
            given = [f"--{k.replace('_', '-')}" for k in ENV_TLS if getattr(ns, k)]
            if given:
                raise ValueError(f"{' '.join(given)} given but the address {addr} is not "
                                 f"tls://; write it as tls://{addr.host}:{addr.port}")
            return addr
        return addr._replace(tls=addr.tls.merged(from_env))
    except ValueError as e:
        raise ValueError(f"bad server address {text!r} (from {source}): {e}") from None
