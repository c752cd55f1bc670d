"""The cluster address: where etcd is and under which key prefix a cluster keeps its state.

One scheme, as the client's other addresses: a comma-separated list of etcd members, then the
prefix. ``etcds://`` speaks TLS to etcd. ``etcd+unix://`` names UNIX sockets, with the socket's
path percent-encoded as the host (the ``http+unix`` convention), for an etcd on this machine.

>>> a = parse_cluster("etcd://h1:2379,h2/stalkd/shop")
>>> [(e.host, e.port) for e in a.endpoints], a.prefix, a.key("leader")
([('h1', 2379), ('h2', 2379)], '/stalkd/shop', '/stalkd/shop/leader')
>>> parse_cluster("etcd+unix://%2Frun%2Fetcd.sock/stalkd/shop").endpoints[0].path
'/run/etcd.sock'
>>> parse_cluster("etcd://h1:2379")
Traceback (most recent call last):
ValueError: etcd://h1:2379: no cluster prefix (write etcd://HOST:PORT,.../stalkd/CLUSTER)
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

__all__ = ["ClusterAddress", "EtcdEndpoint", "parse_cluster", "DEFAULT_PORT"]

DEFAULT_PORT = 2379  # etcd's client port
_SCHEMES = {"etcd": "http", "etcds": "https", "etcd+unix": "unix"}


@dataclass(frozen=True)
class EtcdEndpoint:
    """One etcd member: ``scheme`` is ``http``, ``https`` or ``unix`` (then ``path`` is the socket)."""

    scheme: str
    host: str = ""
    port: int = DEFAULT_PORT
    path: str = ""

    def __str__(self) -> str:
        return self.path if self.scheme == "unix" else f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterAddress:
    """etcd's members and the cluster's key prefix (no trailing slash)."""

    endpoints: tuple[EtcdEndpoint, ...]
    prefix: str
    text: str

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
    hosts, slash, prefix = rest.partition("/")
    prefix = "/" + prefix.strip("/")
    if not slash or prefix == "/":
        raise ValueError(f"{text}: no cluster prefix (write {scheme}://HOST:PORT,.../stalkd/CLUSTER)")
    endpoints = []
    for part in hosts.split(","):
        if not part:
            raise ValueError(f"{text}: an empty etcd address in the list")
        if _SCHEMES[scheme] == "unix":
            endpoints.append(EtcdEndpoint("unix", path=unquote(part)))
            continue
        host, colon, port = part.rpartition(":") if not part.endswith("]") else (part, "", "")
        if not colon:
            host, port = part, str(DEFAULT_PORT)
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text}: {part!r} is not HOST:PORT")
        endpoints.append(EtcdEndpoint(_SCHEMES[scheme], host, int(port)))
    return ClusterAddress(tuple(endpoints), prefix, text)
