"""Server addresses as users write them, the one grammar every client and subcommand reads.

    host:port    host    [::1]:11300    unix:/run/stalkd.sock
    tls://host:port                      TLS, server verified against the system's CAs
    tls://host:port?ca=FILE&cert=FILE&key=FILE&name=SERVER-NAME

A TLS address carries its certificate files in its query, so one string goes everywhere an
address goes (an ``App``'s address, a worker's child processes, a Spark option) and
``str(address)`` parses back to the same value. ``name`` is the host name the server's
certificate must show when it differs from ``host`` (say, connecting by IP address).

Several servers (a primary and its standbys, see docs/standby.md) are one string too: their
addresses joined by commas, ``host1:11300,tls://host2:11301?ca=/etc/ca.pem``. The client
connects to whichever reports itself primary. A comma inside a ``tls://`` setting is written
``%2C`` (``str()`` does so).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, cast
from urllib.parse import parse_qsl, quote

__all__ = ["Address", "AddressList", "TlsParams", "parse_address", "parse_addresses",
           "DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11300
_TLS_KEYS = ("ca", "cert", "key", "name")


class TlsParams(NamedTuple):
    """Files for a TLS connection: ``ca`` verifies the server (None: the system's trust store),
    ``cert``/``key`` are this client's certificate for servers that require one, ``name`` the
    name the server's certificate must carry (None: the host connected to)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    name: str | None = None

    def merged(self, other: TlsParams) -> TlsParams:
        """These values, with ``other``'s where this one has none."""
        return TlsParams(*(a if a is not None else b for a, b in zip(self, other, strict=True)))


class Address(NamedTuple):
    """A TCP ``host``/``port`` (over TLS when ``tls`` is set), or a UNIX socket ``path``.

    >>> parse_address("example.org")
    Address(host='example.org', port=11300, path=None, tls=None)
    """

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    path: str | None = None
    tls: TlsParams | None = None

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        hp = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        if self.tls is None:
            return hp
        query = "&".join(f"{k}={quote(v, safe='/')}" for k, v in zip(_TLS_KEYS, self.tls, strict=True)
                         if v is not None)
        return f"tls://{hp}" + (f"?{query}" if query else "")


def _tls_query(text: str, query: str) -> TlsParams:
    values: dict[str, str] = {}
    for k, v in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        if k not in _TLS_KEYS:
            raise ValueError(f"address {text!r}: unknown setting {k!r} (known: {', '.join(_TLS_KEYS)})")
        if not v:
            raise ValueError(f"address {text!r}: {k}= needs a value")
        values[k] = v
    return TlsParams(**values)


def parse_address(text: str | None = None, host: str | None = None, port: int | None = None,
                  *, tls: TlsParams | None = None) -> Address:
    """An :class:`Address` from its text (every part optional) and/or explicit parts.

    Explicit ``host``/``port`` and the values set in ``tls`` win over what ``text`` says
    (``tls`` applies to ``tls://`` addresses only).

    >>> parse_address("10.0.0.5:11301"), parse_address("[::1]:7")
    (Address(host='10.0.0.5', port=11301, path=None, tls=None), Address(host='::1', port=7, path=None, tls=None))
    >>> str(parse_address("unix:/run/stalkd.sock"))
    'unix:/run/stalkd.sock'
    >>> a = parse_address("tls://q.example:11400?ca=/etc/ca.pem"); a.tls.ca, str(a)
    ('/etc/ca.pem', 'tls://q.example:11400?ca=/etc/ca.pem')
    """
    h, p = DEFAULT_HOST, DEFAULT_PORT
    params: TlsParams | None = None
    if text:
        if text.startswith("unix:"):
            if not text[5:]:
                raise ValueError("address 'unix:' needs a socket path, e.g. unix:/run/stalkd.sock")
            if host is not None or port is not None:
                raise ValueError(f"address {text!r} is a UNIX socket: it takes no host or port")
            return Address(path=text[5:])
        rest = text
        scheme, sep, after = rest.partition("://")
        if sep:
            if scheme not in ("tls", "tcp"):
                raise ValueError(f"address {text!r}: unknown scheme {scheme + '://'!r} "
                                 f"(use host:port, tls://host:port or unix:/path)")
            rest, _, query = after.partition("?")
            if scheme == "tls":
                params = _tls_query(text, query)
            elif query:
                raise ValueError(f"address {text!r}: settings after '?' are for tls:// addresses")
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0:
                raise ValueError(f"address {text!r}: '[' without ']'")
            h, rest = rest[1:end], rest[end + 1:]
            if rest and not rest.startswith(":"):
                raise ValueError(f"address {text!r}: expected ':PORT' after ']'")
            rest = rest[1:]
            port_text = rest
        elif rest.count(":") == 1:
            h_text, port_text = rest.split(":")
            h = h_text or h
        else:  # a bare host name, or a bare IPv6 address (more than one ':')
            h, port_text = rest or h, ""
        if port_text:
            if not port_text.isdigit():
                raise ValueError(f"address {text!r}: port {port_text!r} is not a number")
            p = int(port_text)
    if host is not None:
        h = host
    if port is not None:
        p = port
    if not 0 < p < 65536:
        raise ValueError(f"port {p} is outside 1..65535")
    if params is not None and tls is not None:
        params = tls.merged(params)
    return Address(h, p, None, params)


class AddressList(tuple[Address, ...]):
    """One or more server addresses, in the order the user gave them; ``str()`` joins them
    with commas, which :func:`parse_addresses` reads back.

    >>> str(parse_addresses("a:1, b:2"))
    'a:1,b:2'
    """

    __slots__ = ()

    def __str__(self) -> str:
        return ",".join(str(a) for a in self)


def parse_addresses(text: str | Address | Iterable[str | Address] | None = None,
                    host: str | None = None, port: int | None = None, *,
                    tls: TlsParams | None = None) -> AddressList:
    """The addresses in ``text``: one address, several joined by commas, or an iterable of
    either (``None`` or empty: the default address). ``host``/``port`` override a single
    address's parts, as in :func:`parse_address`; with several they are a ``ValueError``.
    Duplicates are dropped (the first stays).

    >>> [str(a) for a in parse_addresses(["h1", "h2:7,unix:/s"])]
    ['h1:11300', 'h2:7', 'unix:/s']
    """
    items: list[str | Address]
    if text is None:
        items = []
    elif isinstance(text, (str, Address)):
        items = [text]
    else:  # (mypy does not narrow a NamedTuple out of a union with an Iterable)
        items = list(cast("Iterable[str | Address]", text))
    parts: list[str | Address] = []
    for item in items:
        if isinstance(item, Address):
            parts.append(item)
            continue
        pieces = [p.strip() for p in item.split(",")]
        if len(pieces) > 1 and not all(pieces):
            raise ValueError(f"address list {item!r} has an empty entry")
        parts += [p for p in pieces if p]
    if not parts:
        return AddressList([parse_address(None, host, port, tls=tls)])
    if len(parts) > 1 and (host is not None or port is not None):
        raise ValueError(f"host/port overrides apply to one address, not to the "
                         f"{len(parts)} given ({','.join(map(str, parts))})")
    out: list[Address] = []
    for part in parts:
        addr = part if isinstance(part, Address) else parse_address(part, host, port, tls=tls)
        if addr not in out:
            out.append(addr)
    return AddressList(out)
