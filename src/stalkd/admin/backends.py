"""Where ``stalkd jobs|tubes|pause|top`` get their data: the admin API, or the protocol.

``ApiBackend`` speaks to ``stalkd serve --admin`` (fast bulk operations, durable in chunks on
the server). ``ProtocolBackend`` works against any beanstalkd-compatible server, Debian's
beanstalkd included, with what the protocol has: jobs of a tube are found by asking
``stats-job`` for every id the server has handed out (the protocol cannot list a tube), and
bulk operations run on ``WORKERS`` connections at once so their fsyncs are grouped.
Both return the same JSON-able dicts, so the CLI prints one shape either way.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from stalkd.client import errors
from stalkd.client.sync import Client
from stalkd.tubes import is_internal

__all__ = ["ApiBackend", "ProtocolBackend", "Backend", "ApiError", "WORKERS"]

WORKERS = 8  # protocol connections a bulk operation uses at once
_TUBE_KEYS = {"current-jobs-ready": "ready", "current-jobs-reserved": "reserved",
              "current-jobs-delayed": "delayed", "current-jobs-buried": "buried",
              "current-jobs-urgent": "urgent", "current-waiting": "waiting",
              "current-using": "using", "current-watching": "watching",
              "total-jobs": "total_jobs", "cmd-delete": "deletes",
              "pause-time-left": "pause_left"}  # fmt: skip


class ApiError(RuntimeError):
    """The admin API answered with an error (its message), or could not be reached."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ApiBackend:
    """The admin HTTP API of ``stalkd serve --admin``."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 600.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        """``ssl_context``: for an https:// endpoint signed by a private CA (``--admin-tls``),
        and for a client certificate when it asks for one."""
        self.url = url.rstrip("/")
        if "://" not in self.url:
            self.url = "http://" + self.url
        self.token = token
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.kind = "admin API"

    def call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ssl_context) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error", e.reason)
            except ValueError:
                message = str(e.reason)
            raise ApiError(e.code, f"{self.url}: {message}") from None
        except (urllib.error.URLError, OSError) as e:
            raise ApiError(0, f"cannot reach the admin API at {self.url}: "
                              f"{getattr(e, 'reason', e)}") from None

    def overview(self) -> dict[str, Any]:
        data: dict[str, Any] = self.call("GET", "/api/v1/overview")
        return data

    def tubes(self) -> list[dict[str, Any]]:
        """Every tube, page by page (the overview answers a page at a time)."""
        rows: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            page: dict[str, Any] = self.call("GET", f"/api/v1/overview?offset={offset}&limit=5000")
            rows.extend(page["tubes"])
            offset = page.get("next")
        return rows

    def jobs(self, tube: str, state: str, limit: int, after: int = 0) -> dict[str, Any]:
        q = urllib.parse.urlencode({"state": state, "limit": limit, "after": after})
        data: dict[str, Any] = self.call("GET", f"/api/v1/tubes/{urllib.parse.quote(tube)}/jobs?{q}")
        return data

    def _select(self, tube: str, state: str, ids: Sequence[int] | None) -> dict[str, Any]:
        return {"ids": list(ids)} if ids else {"tube": tube, "state": state}

    def delete(self, tube: str, state: str, ids: Sequence[int] | None) -> dict[str, Any]:
        data: dict[str, Any] = self.call("POST", "/api/v1/jobs/delete", self._select(tube, state, ids))
        return data

    def kick(self, tube: str, state: str, ids: Sequence[int] | None) -> dict[str, Any]:
        data: dict[str, Any] = self.call("POST", "/api/v1/jobs/kick", self._select(tube, state, ids))
        return data

    def move(self, tube: str, state: str, ids: Sequence[int] | None, to: str) -> dict[str, Any]:
        body = {**self._select(tube, state, ids), "to": to}
        data: dict[str, Any] = self.call("POST", "/api/v1/jobs/move", body)
        return data

    def pause(self, tube: str, seconds: int) -> dict[str, Any]:
        data: dict[str, Any] = self.call("POST", f"/api/v1/tubes/{urllib.parse.quote(tube)}/pause",
                                         {"seconds": seconds})
        return data

    def promote(self) -> dict[str, Any]:
        data: dict[str, Any] = self.call("POST", "/api/v1/promote", {})
        return data


class ProtocolBackend:
    """Any beanstalkd-compatible server, through the protocol alone."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self.kind = "protocol"

    def _client(self) -> Client:
        return Client(self.address, timeout=self.timeout)

    def tubes(self) -> list[dict[str, Any]]:
        rows = []
        with self._client() as c:
            for name in c.list_tubes():
                try:
                    st = c.stats_tube(name)
                except errors.NotFound:
                    continue  # dropped meanwhile
                row: dict[str, Any] = {"name": name, "internal": is_internal(name)}
                for k, v in _TUBE_KEYS.items():
                    row[v] = st.get(k, 0)
                row["paused"] = bool(st.get("pause-time-left", 0))
                rows.append(row)
        return rows

    def stats(self) -> dict[str, Any]:
        with self._client() as c:
            return dict(c.stats())

    def _find(self, tube: str, state: str, limit: int | None = None) -> list[dict[str, Any]]:
        """stats-job for every id up to the server's total-jobs, on WORKERS connections."""
        with self._client() as c:
            top = int(c.stats().get("total-jobs", 0))
        top += 64  # ids an EXPECTED_CRLF or DRAINING put used without counting a job

        def scan(stripe: int) -> list[dict[str, Any]]:
            found = []
            with self._client() as c:
                for jid in range(1 + stripe, top + 1, WORKERS):
                    try:
                        st = c.stats_job(jid)
                    except errors.NotFound:
                        continue
                    if st.get("tube") == tube and state in ("all", st.get("state")):
                        found.append({k.replace("-", "_"): v for k, v in st.items()})
            return found

        with ThreadPoolExecutor(WORKERS) as pool:
            rows = [r for part in pool.map(scan, range(WORKERS)) for r in part]
        rows.sort(key=lambda r: int(r["id"]))
        return rows if limit is None else rows[:limit]

    def jobs(self, tube: str, state: str, limit: int, after: int = 0) -> dict[str, Any]:
        rows = [r for r in self._find(tube, state) if int(r["id"]) > after]
        page = rows[:limit]
        with self._client() as c:
            for r in page:
                try:
                    body = c.peek(int(r["id"])).body
                except errors.NotFound:
                    body = b""
                r["size"] = len(body)
                r["body"] = body[:64].decode("utf-8", "replace")
        nxt = page[-1]["id"] if len(rows) > limit else None
        return {"tube": tube, "state": state, "jobs": page, "next": nxt}

    def _bulk(self, ids: Sequence[int], one: Callable[[Client, int], str]) -> dict[str, Any]:
        def run(stripe: int) -> dict[str, int]:
            counts: dict[str, int] = {}
            with self._client() as c:
                for jid in ids[stripe::WORKERS]:
                    try:
                        outcome = one(c, jid)
                    except errors.NotFound:
                        outcome = "not_found"
                    counts[outcome] = counts.get(outcome, 0) + 1
            return counts

        total: dict[str, int] = {}
        with ThreadPoolExecutor(WORKERS) as pool:
            for counts in pool.map(run, range(WORKERS)):
                for k, v in counts.items():
                    total[k] = total.get(k, 0) + v
        return {"requested": len(ids), "outcomes": total}

    def _ids(self, tube: str, state: str, ids: Sequence[int] | None) -> list[int]:
        if ids:
            return list(ids)
        return [int(r["id"]) for r in self._find(tube, state) if r["state"] != "reserved"]

    def delete(self, tube: str, state: str, ids: Sequence[int] | None) -> dict[str, Any]:
        def one(c: Client, jid: int) -> str:
            c.delete(jid)
            return "deleted"

        return self._bulk(self._ids(tube, state, ids), one)

    def kick(self, tube: str, state: str, ids: Sequence[int] | None) -> dict[str, Any]:
        def one(c: Client, jid: int) -> str:
            c.kick_job(jid)
            return "kicked"

        return self._bulk(self._ids(tube, state, ids), one)

    def move(self, tube: str, state: str, ids: Sequence[int] | None, to: str) -> dict[str, Any]:
        new_ids: dict[str, int] = {}

        def one(c: Client, jid: int) -> str:
            st = c.stats_job(jid)
            if st.get("state") == "reserved":
                return "skipped_reserved"
            body = c.peek(jid).body
            c.use(to)
            delay = int(st.get("time-left", 0)) if st.get("state") == "delayed" else 0
            new = c.put(body, priority=int(st["pri"]), delay=max(0, delay), ttr=int(st["ttr"]))
            if st.get("state") == "buried":
                c.reserve_job(new)
                c.bury(new, priority=int(st["pri"]))
            c.delete(jid)
            new_ids[str(jid)] = new
            return "moved"

        out = self._bulk(self._ids(tube, state, ids), one)
        out["new_ids"] = new_ids
        return out

    def pause(self, tube: str, seconds: int) -> dict[str, Any]:
        with self._client() as c:
            try:
                c.pause_tube(tube, seconds)
            except errors.NotFound:
                return {"tube": tube, "paused": False, "error": "no such tube"}
        return {"tube": tube, "paused": seconds > 0, "seconds": seconds}


Backend = ApiBackend | ProtocolBackend
