"""The cluster address: where etcd is and under which key prefix a cluster keeps its state.

One scheme, as the client's other addresses: a comma-separated list of etcd members, then the
prefix. ``etcds://`` speaks TLS to etcd, with the client's ``tls://`` settings as a query:
``?ca=CA.pem&cert=node.pem&key=node.key`` (the CA that signed etcd's certificate, and this
node's identity when etcd asks for client certificates). ``etcd+unix://`` (``etcds+unix://``)
names UNIX sockets, with the socket's path percent-encoded as the host (the ``http+unix``
convention), for an etcd on this machine.

>>> a = parse_cluster("etcd://h1:2379,h2/stalkd/shop")
>>> [(e.host, e.port) for e in a.endpoints], a.prefix, a.key("leader")
([('h1', 2379), ('h2', 2379)], '/stalkd/shop', '/stalkd/shop/leader')
>>> parse_cluster("etcd+unix://%2Frun%2Fetcd.sock/stalkd/shop").endpoints[0].path
'/run/etcd.sock'
>>> parse_cluster("etcds://h1/stalkd/shop?ca=/etc/ca.pem&cert=/etc/n.pem").tls
EtcdTls(ca='/etc/ca.pem', cert='/etc/n.pem', key=None, name=None)
>>> parse_cluster("etcd://h1:2379")
Traceback (most recent call last):
ValueError: etcd://h1:2379: no cluster prefix (write etcd://HOST:PORT,.../stalkd/CLUSTER)
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

__all__ = ["ClusterAddress", "EtcdEndpoint", "EtcdTls", "parse_cluster", "DEFAULT_PORT"]

DEFAULT_PORT = 2379  # etcd's client port
_SCHEMES = {"etcd": "http", "etcds": "https", "etcd+unix": "unix", "etcds+unix": "unixs"}
_TLS_KEYS = ("ca", "cert", "key", "name")


@dataclass(frozen=True)
class EtcdTls:
    """TLS to etcd: ``ca`` verifies etcd's certificate (None: the system's), ``cert``/``key``
    are this node's identity, ``name`` the name etcd's certificate must show (default: the
    host; ``localhost`` over a UNIX socket)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class EtcdEndpoint:
    """One etcd member: ``scheme`` is ``http``, ``https`` or ``unix`` (then ``path`` is the socket)."""

    scheme: str
    host: str = ""
    port: int = DEFAULT_PORT
    path: str = ""

    def __str__(self) -> str:
        return self.path if self.scheme in ("unix", "unixs") else f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterAddress:
    """etcd's members and the cluster's key prefix (no trailing slash)."""

    endpoints: tuple[EtcdEndpoint, ...]
    prefix: str
    text: str
    tls: EtcdTls | None = None

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def __str__(self) -> str:
        return self.text


def parse_cluster(text: str) -> ClusterAddress:
    """``etcd://HOST[:PORT],.../PREFIX`` (or ``etcds://``, ``etcd+unix://``); ValueError says
    what is wrong and what to write instead."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in _SCHEMES:
        raise ValueError(f"{text}: not a cluster address (write etcd://HOST:PORT,.../stalkd/CLUSTER)")
    rest, _, query = rest.partition("?")
    tls = None
    if _SCHEMES[scheme] in ("https", "unixs"):
        q = parse_qs(query, keep_blank_values=True, strict_parsing=False)
        unknown = sorted(set(q) - set(_TLS_KEYS))
        if unknown:
            raise ValueError(f"{text}: unknown TLS setting {unknown[0]!r} (ca=, cert=, key=, name=)")
        tls = EtcdTls(**{k: q[k][-1] for k in _TLS_KEYS if k in q and q[k][-1]})
    elif query:
        raise ValueError(f"{text}: settings after '?' are for TLS: write etcds://")
    hosts, slash, prefix = rest.partition("/")
    prefix = "/" + prefix.strip("/")
    if not slash or prefix == "/":
        raise ValueError(f"{text}: no cluster prefix (write {scheme}://HOST:PORT,.../stalkd/CLUSTER)")
    endpoints = []
    for part in hosts.split(","):
        if not part:
            raise ValueError(f"{text}: an empty etcd address in the list")
        if _SCHEMES[scheme] in ("unix", "unixs"):
            endpoints.append(EtcdEndpoint(_SCHEMES[scheme], path=unquote(part)))
            continue
        host, colon, port = part.rpartition(":") if not part.endswith("]") else (part, "", "")
        if not colon:
            host, port = part, str(DEFAULT_PORT)
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text}: {part!r} is not HOST:PORT")
        endpoints.append(EtcdEndpoint(_SCHEMES[scheme], host, int(port)))
    return ClusterAddress(tuple(endpoints), prefix, text, tls)
