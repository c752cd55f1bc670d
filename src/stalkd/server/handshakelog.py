"""Failed TLS handshakes, in the log: the peer, the reason in words, and never a flood.

A client that fails the handshake (no certificate, one of another CA, an expired one, plain
text sent to the TLS port, a half-open connection that never finishes) never becomes a
connection, so nothing else would say it came. ``HandshakeLog.failed`` is called by whoever runs
the handshake, with the peer's address and the exception it ended with.

Ensures: at most ``burst`` lines per ``window`` seconds; past that the failures are counted,
and the next line after the window says how many went unlogged. The decision is pure (the
caller's clock), so a scan of the TLS port costs a few lines a minute.

>>> lines = []
>>> hl = HandshakeLog(burst=2, window=60.0, emit=lines.append)
>>> for t in (0.0, 1.0, 2.0, 3.0, 61.0):
...     hl.failed("10.0.0.9:5000", TimeoutError(), now=t)
>>> lines
['TLS handshake from 10.0.0.9:5000 failed: timed out before it finished', 'TLS handshake from 10.0.0.9:5000 failed: timed out before it finished', 'TLS handshake from 10.0.0.9:5000 failed: timed out before it finished (and 2 more failed handshakes in the last 60s, not logged one by one)']
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

__all__ = ["HandshakeLog", "reason"]

log = logging.getLogger("stalkd.server")

# OpenSSL's reasons for a refused client, in words
_REASONS = {
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "no client certificate",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "no client certificate",
    "HTTP_REQUEST": "not TLS (an HTTP request on the TLS port)",
    "WRONG_VERSION_NUMBER": "not TLS (plain text on the TLS port?)",
    "UNSUPPORTED_PROTOCOL": "the client offers only TLS versions older than 1.2",
    "NO_SHARED_CIPHER": "no cipher in common with the client",
    "TLSV1_ALERT_UNKNOWN_CA": "the client does not trust this server's certificate (unknown CA)",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the client refused this server's certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the client says this server's certificate expired",
}
# X509_V_ERR_* codes for the client's certificate
_UNKNOWN_CA = frozenset({2, 18, 19, 20, 21})
_EXPIRED, _NOT_YET = 10, 9


def reason(exc: BaseException) -> str:
    """Why a handshake failed, in words (``exc``: what the handshake raised).

    >>> reason(ConnectionResetError()), reason(ssl.SSLError(1, "x"))
    ('the client closed the connection', 'x')
    """
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        if code in _UNKNOWN_CA:
            return "client certificate not signed by a CA of --tls-client-ca (unknown CA)"
        if code == _EXPIRED:
            return "client certificate expired"
        if code == _NOT_YET:
            return "client certificate not valid yet"
        return f"client certificate refused: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        why = getattr(exc, "reason", None)  # set by OpenSSL's errors, not by every SSLError
        text = _REASONS.get(str(why or ""))
        return text if text is not None else str(why or exc.strerror or exc)
    if isinstance(exc, TimeoutError):
        return "timed out before it finished"
    if isinstance(exc, (ConnectionError, EOFError)):
        return "the client closed the connection"
    return str(exc) or type(exc).__name__


class HandshakeLog:
    """Rate-limited WARNING lines about failed handshakes (see the module docstring)."""

    def __init__(self, *, burst: int = 10, window: float = 60.0,
                 emit: Callable[[str], None] | None = None) -> None:
        self.burst = burst
        self.window = window
        self.emit = emit if emit is not None else log.warning
        self.failures = 0  # all of them, for whoever counts
        self._start = float("-inf")  # the current window's start
        self._logged = 0  # lines in the current window
        self._unlogged = 0  # failures not logged since the last line

    def failed(self, peer: str, exc: BaseException, *, now: float) -> None:
        """A handshake from ``peer`` ended with ``exc`` at ``now`` (the caller's clock, s)."""
        self.failures += 1
        if now - self._start >= self.window:
            self._start, self._logged = now, 0
        if self._logged >= self.burst:
            self._unlogged += 1
            return
        self._logged += 1
        line = f"TLS handshake from {peer} failed: {reason(exc)}"
        if self._unlogged:
            line += (f" (and {self._unlogged} more failed handshakes in the last "
                     f"{self.window:.0f}s, not logged one by one)")
            self._unlogged = 0
        self.emit(line)
