"""Which open TLS connections a reload (SIGHUP) no longer admits, and why.

A connection was let in by the client CAs and the ACL of its time. After a reload it keeps
going only if it would still be: its certificate was issued by one of the CA certificates the
new ``--tls-client-ca`` still holds (the very certificate, not one with the same name: a CA
made again under the same subject is another CA), and it has not expired; and the ACL still
grants its identity something and every tube it watches (``acl.ConnPolicy.revoked``).

Ensures: pure decisions on what the handshake gave (``getpeercert()``, both forms) and the
contexts; the caller closes the connections and logs each.
"""

from __future__ import annotations

import ssl
from typing import Any

__all__ = ["CaIndex", "untrusted"]


class CaIndex:
    """A context's CA certificates (DER) by subject, read once per context (each TLS
    connection asks which of them issued its certificate)."""

    __slots__ = ("ctx", "held", "_by_subject")

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.ctx = ctx
        self.held = frozenset(ctx.get_ca_certs(binary_form=True))
        self._by_subject: dict[object, frozenset[bytes]] = {}
        for ca, der in zip(ctx.get_ca_certs(), ctx.get_ca_certs(binary_form=True), strict=True):
            subject = ca.get("subject")
            self._by_subject[subject] = self._by_subject.get(subject, frozenset()) | {der}

    def issuers(self, peercert: dict[str, Any] | None) -> frozenset[bytes]:
        """The CA certificates whose subject issued ``peercert``."""
        if not peercert or "issuer" not in peercert:
            return frozenset()
        return self._by_subject.get(peercert["issuer"], frozenset())


def untrusted(held: frozenset[bytes], trusted_by: frozenset[bytes], peercert: dict[str, Any] | None,
              now: float) -> str | None:
    """Why a connection verified by ``trusted_by`` no longer passes a context holding the CA
    certificates ``held`` (``CaIndex.held``; None: it does)."""
    if not trusted_by:
        return None  # it showed no certificate (no client CA then): nothing to check again
    if not trusted_by & held:
        return "its certificate's CA is no longer in --tls-client-ca"
    after = (peercert or {}).get("notAfter")
    if after and ssl.cert_time_to_seconds(after) <= now:
        return f"its certificate expired ({after})"
    return None
