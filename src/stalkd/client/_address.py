"""Server addresses as users write them: ``host:port``, ``host``, ``[::1]:11300``, ``unix:/path``."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Address", "parse_address", "DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11300


class Address(NamedTuple):
    """A TCP ``host``/``port``, or a UNIX socket ``path`` (then host and port are unused).

    >>> parse_address("example.org")
    Address(host='example.org', port=11300, path=None)
    """

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    path: str | None = None

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str | None = None, host: str | None = None, port: int | None = None) -> Address:
    """An :class:`Address` from ``"host:port"`` (either part optional) and/or explicit parts.

    Explicit ``host``/``port`` win over what ``text`` says.

    >>> parse_address("10.0.0.5:11301"), parse_address("[::1]:7")
    (Address(host='10.0.0.5', port=11301, path=None), Address(host='::1', port=7, path=None))
    >>> str(parse_address("unix:/run/stalkd.sock"))
    'unix:/run/stalkd.sock'
    """
    h, p = DEFAULT_HOST, DEFAULT_PORT
    if text:
        if text.startswith("unix:"):
            if not text[5:]:
                raise ValueError("address 'unix:' needs a socket path, e.g. unix:/run/stalkd.sock")
            return Address(path=text[5:])
        rest = text
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
    return Address(h, p)
