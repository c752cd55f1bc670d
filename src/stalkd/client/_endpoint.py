"""What both transports keep about the server(s) they talk to, across connections: the
addresses and the one in use, the timeout, the failover policy, the session's tubes (restored
on each new connection), whether the user closed the client, and the rule that a client made
with ``reconnect=False`` does not open again a connection it lost.
"""

from __future__ import annotations

from collections.abc import Sequence

from stalkd.client._address import Address, parse_addresses
from stalkd.client._core import Session
from stalkd.client._failover import Failover
from stalkd.client.errors import ConnectionClosed

__all__ = ["Endpoint"]


class Endpoint:
    """The state :class:`~stalkd.client._transport.BlockingTransport` and
    :class:`~stalkd.client._aiotransport.AsyncTransport` share (the clients' docstrings: the
    arguments)."""

    def __init__(self, address: str | Address | Sequence[str | Address] | None, *,
                 host: str | None, port: int | None, timeout: float | None, reconnect: bool,
                 failover_timeout: float | None) -> None:
        self.addresses = parse_addresses(address, host, port)
        #: the server connected to (or to be tried first)
        self.address: Address = self.addresses[0]
        self.timeout = timeout
        self.reconnect_enabled = reconnect
        self._failover = Failover(self.addresses, failover_timeout=failover_timeout,
                                  reconnect=reconnect)
        self._closed_by_user = False
        self._session = Session()
        self._ever_connected = False

    def _may_connect(self) -> None:
        """Before opening a connection: ``ConnectionClosed`` if this one may not reopen."""
        if self._ever_connected and not self.reconnect_enabled:
            raise ConnectionClosed(f"connection to {self.address} was closed (reconnect=False)")

    def _opened(self) -> None:
        """A connection is open (before the session is restored on it)."""
        self._ever_connected = True
        self._closed_by_user = False

    def _user_closed(self) -> bool:
        return self._closed_by_user
