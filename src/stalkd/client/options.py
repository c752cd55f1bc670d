"""The server address and TLS options every ``stalkd`` client subcommand shares.

One helper adds them to a parser and one turns the parsed values into an :class:`Address`,
so ``put``, ``peek``, ``worker``, ``failed``, ``retry`` and the admin commands read the same
flags and environment variables the same way:

    -a/--address ADDR   $STALKD_ADDR       host:port, unix:/path or tls://host:port; several
                                           servers (primary and standbys) joined by commas,
                                           or -a repeated: -a h1:11300,h2:11300 = -a h1 -a h2
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
    addresses = server_addresses(ns)      # ValueError with a message fit for the user
    with Client(str(addresses)) as c: ...  # finds the primary among them
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from stalkd.client._address import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    Address,
    AddressList,
    TlsParams,
    parse_addresses,
)

__all__ = ["add_server_options", "server_address", "server_addresses", "ENV_ADDR", "ENV_TLS"]

ENV_ADDR = "STALKD_ADDR"
# option dest -> environment variable
ENV_TLS = {"tls_ca": "STALKD_TLS_CA", "tls_cert": "STALKD_TLS_CERT", "tls_key": "STALKD_TLS_KEY"}


def add_server_options(p: argparse.ArgumentParser, *, default: str | None = None) -> None:
    """Add ``-a/--address``, ``--tls-ca/--tls-cert/--tls-key`` and the deprecated
    ``--host/--port`` to ``p``, in a group of their own. ``default`` names what is used when
    neither ``-a`` nor ``$STALKD_ADDR`` is given (for the help text only)."""
    g = p.add_argument_group("server (one address scheme for every stalkd command)")
    g.add_argument("-a", "--address", metavar="ADDR", action="append",
                   help=f"host:port, unix:/path or tls://host:port; for a primary and its "
                        f"standbys give all, comma-separated or as repeated -a (default: "
                        f"${ENV_ADDR}, else {default or f'{DEFAULT_HOST}:{DEFAULT_PORT}'})")
    g.add_argument("--tls-ca", metavar="FILE",
                   help="CA certificate(s) to verify a tls:// server with (default: "
                        "$STALKD_TLS_CA, else the system's trust store)")
    g.add_argument("--tls-cert", metavar="FILE",
                   help="client certificate, for servers that require one (default: $STALKD_TLS_CERT)")
    g.add_argument("--tls-key", metavar="FILE",
                   help="private key of --tls-cert (default: $STALKD_TLS_KEY)")
    g.add_argument("--host", help="deprecated: use -a HOST:PORT")
    g.add_argument("--port", type=int, help="deprecated: use -a HOST:PORT")


def server_addresses(ns: argparse.Namespace, *, default: str | None = None,
                     env: Mapping[str, str] | None = None) -> AddressList:
    """The addresses the parsed options ask for: every ``-a`` (each may list several,
    comma-separated), else ``$STALKD_ADDR``, else ``default`` (else 127.0.0.1:11300). The TLS
    flags and ``$STALKD_TLS_*`` apply to each ``tls://`` address. Raises ``ValueError`` naming
    where a bad value came from.

    >>> ns = argparse.Namespace(address=["h1:1,h2:2", "h3"], tls_ca=None, tls_cert=None,
    ...                         tls_key=None, host=None, port=None)
    >>> str(server_addresses(ns, env={}))
    'h1:1,h2:2,h3:11300'
    """
    env = os.environ if env is None else env
    given: list[str] = ([ns.address] if isinstance(ns.address, str) else ns.address) or []
    text: str | list[str] | None = given or env.get(ENV_ADDR) or default
    source = "-a" if given else f"${ENV_ADDR}" if env.get(ENV_ADDR) else "the default"
    shown = ",".join(given) if given else text
    flags = TlsParams(ns.tls_ca, ns.tls_cert, ns.tls_key)
    from_env = TlsParams(*(env.get(v) or None for v in ENV_TLS.values()))
    try:
        addrs = parse_addresses(text, ns.host, ns.port, tls=flags)
        plain = [a for a in addrs if a.tls is None]
        flagged = [f"--{k.replace('_', '-')}" for k in ENV_TLS if getattr(ns, k)]
        if flagged and plain:
            a = plain[0]
            raise ValueError(f"{' '.join(flagged)} given but the address {a} is not "
                             f"tls://; write it as tls://{a.host}:{a.port}")
        return AddressList(a if a.tls is None else a._replace(tls=a.tls.merged(from_env))
                           for a in addrs)
    except ValueError as e:
        raise ValueError(f"bad server address {shown!r} (from {source}): {e}") from None


def server_address(ns: argparse.Namespace, *, default: str | None = None,
                   env: Mapping[str, str] | None = None) -> Address:
    """The one address the parsed options ask for, for commands that talk to exactly one
    server; several are a ``ValueError`` (see :func:`server_addresses`).

    >>> ns = argparse.Namespace(address=["tls://q:1"], tls_ca="ca.pem", tls_cert=None,
    ...                         tls_key=None, host=None, port=None)
    >>> str(server_address(ns, env={}))
    'tls://q:1?ca=ca.pem'
    """
    addrs = server_addresses(ns, default=default, env=env)
    if len(addrs) != 1:
        raise ValueError(f"this command talks to one server; {len(addrs)} addresses given "
                         f"({addrs})")
    return addrs[0]
