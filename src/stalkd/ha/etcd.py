"""A small client for etcd's v3 API, through the JSON gateway etcd serves on its client port.

Only what leadership needs: leases (grant, keep alive, revoke), a key created only if absent
(a transaction comparing its create revision with 0), reads, puts and conditional deletes.
The gateway needs no dependency beyond the standard library, and every call is one short
HTTP request, so a call's time bound is the socket timeout. Keys and values are bytes on the
wire (base64 in the JSON), strings and bytes here.

Ensures: a call either returns etcd's answer or raises: ``EtcdUnavailable`` when no member
answered (each is tried in turn, the last one that answered first), ``EtcdError`` when a member
answered with an error. Nothing is retried behind the caller's back, so a caller that holds a
lease knows how old its last renewal is.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any

from stalkd.ha.address import ClusterAddress, EtcdEndpoint, EtcdTls

__all__ = ["Etcd", "EtcdError", "EtcdUnavailable", "KeyValue", "tls_context"]


class EtcdError(Exception):
    """An etcd member answered with an error."""


class EtcdUnavailable(EtcdError):
    """No etcd member could be reached in time."""


@dataclass(frozen=True)
class KeyValue:
    """A key as etcd keeps it: ``create_revision`` is the cluster revision that created it (a
    fencing token: a later holder's key has a larger one); ``lease`` 0 for none."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _kv(raw: dict[str, Any]) -> KeyValue:
    return KeyValue(base64.b64decode(raw["key"]).decode(), base64.b64decode(raw.get("value", "")),
                    int(raw.get("create_revision", 0)), int(raw.get("mod_revision", 0)),
                    int(raw.get("lease", 0)))


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float, tls: ssl.SSLContext | None = None,
                 name: str = "localhost") -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path
        self._tls = tls
        self._name = name

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
            if self._tls is not None:
                s = self._tls.wrap_socket(s, server_hostname=self._name)
        except OSError:
            s.close()
            raise
        self.sock = s


def tls_context(tls: EtcdTls | None) -> ssl.SSLContext:
    """The context for TLS to etcd: its certificate verified (``ca``, or the system's trust
    store), TLS 1.2 or newer, this node's certificate when given. A file that cannot be used
    is a ValueError naming it, before any connection."""
    tls = tls or EtcdTls()
    try:
        ctx = ssl.create_default_context(cafile=tls.ca)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"etcd TLS: cannot load CA certificates from {tls.ca}: {e}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.cert is not None:
        try:
            ctx.load_cert_chain(tls.cert, tls.key)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"etcd TLS: cannot load the certificate {tls.cert} "
                             f"(key {tls.key or 'in the same file'}): {e}") from None
    elif tls.key is not None:
        raise ValueError(f"etcd TLS: a key ({tls.key}) without the certificate it belongs to")
    return ctx


class Etcd:
    """etcd's members ``endpoints``; each request gives up after ``timeout`` seconds per member.
    ``tls`` is the context for ``https`` members (client certificates go in it).

    Not thread-safe: one thread (the lease keeper's) uses one instance.
    """

    def __init__(self, endpoints: tuple[EtcdEndpoint, ...] | ClusterAddress, *, timeout: float = 1.0,
                 tls: ssl.SSLContext | None = None) -> None:
        self.endpoints = endpoints.endpoints if isinstance(endpoints, ClusterAddress) else endpoints
        if not self.endpoints:
            raise ValueError("no etcd endpoint")
        self.timeout = timeout
        settings = endpoints.tls if isinstance(endpoints, ClusterAddress) else None
        self._name = settings.name if settings is not None else None
        if tls is None and any(ep.scheme in ("https", "unixs") for ep in self.endpoints):
            tls = tls_context(settings)
        self._tls = tls
        self._first = 0  # the member that answered last: asked first next time

    def _connection(self, ep: EtcdEndpoint) -> http.client.HTTPConnection:
        if ep.scheme in ("unix", "unixs"):
            return _UnixConnection(ep.path, self.timeout, self._tls if ep.scheme == "unixs" else None,
                                   self._name or "localhost")
        if ep.scheme == "https":
            assert self._tls is not None
            return http.client.HTTPSConnection(ep.host, ep.port, timeout=self.timeout, context=self._tls)
        return http.client.HTTPConnection(ep.host, ep.port, timeout=self.timeout)

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` on the first member that answers; its JSON answer."""
        n = len(self.endpoints)
        errors = []
        for i in range(n):
            k = (self._first + i) % n
            ep = self.endpoints[k]
            conn = self._connection(ep)
            try:
                conn.request("POST", f"/v3/{path}", json.dumps(body),
                             {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
            except ssl.SSLError as e:  # say why: a refused certificate is not an outage
                errors.append(f"{ep}: TLS: {e.reason or e}")
                continue
            except (OSError, http.client.HTTPException) as e:
                errors.append(f"{ep}: {e or type(e).__name__}")
                continue
            finally:
                conn.close()
            self._first = k
            try:
                answer: dict[str, Any] = json.loads(data)
            except ValueError:
                raise EtcdError(f"{ep} /v3/{path}: not JSON (HTTP {resp.status})") from None
            if resp.status != 200 or "error" in answer:
                msg = answer.get("message") or answer.get("error") or f"HTTP {resp.status}"
                if answer.get("code") == 14:  # UNAVAILABLE: this member has no quorum
                    errors.append(f"{ep}: {msg}")
                    continue
                raise EtcdError(f"{ep} /v3/{path}: {msg}")
            return answer
        raise EtcdUnavailable("no etcd member answered: " + "; ".join(errors))

    # --- leases ------------------------------------------------------------------------------

    def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease of ``ttl`` seconds: (its id, the TTL etcd granted)."""
        r = self.call("lease/grant", {"TTL": ttl})
        return int(r["ID"]), int(r["TTL"])

    def keepalive(self, lease: int) -> int:
        """Renew ``lease``; the TTL it has again, 0 when it has expired (or never existed)."""
        r = self.call("lease/keepalive", {"ID": str(lease)})
        return int(r.get("result", {}).get("TTL", 0))

    def revoke(self, lease: int) -> None:
        """End ``lease`` now: the keys attached to it are deleted."""
        try:
            self.call("lease/revoke", {"ID": str(lease)})
        except EtcdError as e:
            if "not found" not in str(e):
                raise

    # --- keys --------------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        r = self.call("kv/range", {"key": _b64(key)})
        kvs = r.get("kvs") or []
        return _kv(kvs[0]) if kvs else None

    def get_prefix(self, prefix: str) -> list[KeyValue]:
        """Every key under ``prefix`` (ends with ``/``), in key order."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self.call("kv/range", {"key": _b64(prefix), "range_end": _b64(end)})
        return [_kv(raw) for raw in r.get("kvs") or []]

    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Set ``key``; the revision that did it."""
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        return int(self.call("kv/put", body)["header"]["revision"])

    def create(self, key: str, value: bytes, lease: int = 0) -> tuple[bool, KeyValue | None]:
        """Set ``key`` only if it does not exist. (True, the new key) when this call created it,
        else (False, the key as it is; None if it vanished meanwhile)."""
        put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        r = self.call("kv/txn", {
            "compare": [{"key": _b64(key), "target": "CREATE", "create_revision": "0"}],
            "success": [{"request_put": put}],
            "failure": [{"request_range": {"key": _b64(key)}}],
        })
        if r.get("succeeded"):
            rev = int(r["header"]["revision"])
            return True, KeyValue(key, value, rev, rev, lease)
        kvs = (r.get("responses") or [{}])[0].get("response_range", {}).get("kvs") or []
        return False, (_kv(kvs[0]) if kvs else None)

    def create_counting(self, key: str, info: dict[str, Any], lease: int, counter: str
                        ) -> tuple[bool, KeyValue | None, int]:
        """Create ``key`` (absent) bound to ``lease`` and advance the number in ``counter`` by one,
        in one transaction; ``info`` is stored with that number as ``epoch``. (True, the key,
        the number) when this call did both; else (False, the key as it is, 0). Retries only
        when ``counter`` moved under it (another campaign that lost the key race)."""
        for _ in range(8):
            kv = self.get(counter)
            try:
                n = int(kv.value) if kv is not None else 0
            except ValueError:
                n = 0
            value = json.dumps({**info, "epoch": n + 1}).encode()
            put: dict[str, Any] = {"key": _b64(key), "value": _b64(value), "lease": str(lease)}
            r = self.call("kv/txn", {
                "compare": [{"key": _b64(key), "target": "CREATE", "create_revision": "0"},
                            {"key": _b64(counter), "target": "MOD",
                             "mod_revision": str(kv.mod_revision if kv is not None else 0)}],
                "success": [{"request_put": put},
                            {"request_put": {"key": _b64(counter), "value": _b64(str(n + 1))}}],
                "failure": [{"request_range": {"key": _b64(key)}}],
            })
            if r.get("succeeded"):
                rev = int(r["header"]["revision"])
                return True, KeyValue(key, value, rev, rev, lease), n + 1
            kvs = (r.get("responses") or [{}])[0].get("response_range", {}).get("kvs") or []
            if kvs:
                return False, _kv(kvs[0]), 0
        raise EtcdError(f"{counter}: kept changing during a campaign")

    def delete_if(self, key: str, create_revision: int) -> bool:
        """Delete ``key`` if it is still the one created at ``create_revision`` (ours)."""
        r = self.call("kv/txn", {
            "compare": [{"key": _b64(key), "target": "CREATE", "create_revision": str(create_revision)}],
            "success": [{"request_delete_range": {"key": _b64(key)}}],
        })
        return bool(r.get("succeeded"))

    def put_if(self, key: str, value: bytes, *, guard: str, guard_revision: int, lease: int = 0) -> bool:
        """Set ``key`` only while ``guard`` is still the key created at ``guard_revision`` (only
        the leader of that epoch may write what depends on its leadership)."""
        put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        r = self.call("kv/txn", {
            "compare": [{"key": _b64(guard), "target": "CREATE", "create_revision": str(guard_revision)}],
            "success": [{"request_put": put}],
        })
        return bool(r.get("succeeded"))
