"""Where ``stalkd jobs|tubes|pause|top`` get their data: the admin API, or the protocol.

``ApiBackend`` speaks to ``stalkd serve --admin`` (fast bulk operations, durable in chunks on
the server). ``ProtocolBackend`` works against any beanstalkd-compatible server, Debian's
beanstalkd included, with what the protocol has: the jobs of a tube are found head by head
(``walk``: peek each state, take the head out of the way), and operations on ids given by the
caller run on ``WORKERS`` connections at once so their fsyncs are grouped.
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

from stalkd.admin import walk
from stalkd.client import errors
from stalkd.client.sync import Client
from stalkd.tubes import FAILED_TUBE, is_internal

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

    def overview(self, **page: Any) -> dict[str, Any]:
        """The overview; ``page``: offset, limit, sort, q, internal (see the API's routes)."""
        query = {k: (int(v) if isinstance(v, bool) else v) for k, v in page.items()}
        data: dict[str, Any] = self.call(
            "GET", "/api/v1/overview" + (f"?{urllib.parse.urlencode(query)}" if query else ""))
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

    def jobs(self, tube: str, state: str, limit: int, after: int = 0) -> dict[str, Any]:
        """The jobs of ``tube`` found by ``walk`` (ready and buried borrowed and put back,
        the delayed head, no reserved ones), the ``limit`` smallest ids above ``after``;
        ``partial`` says what the protocol could not show."""
        with self._client() as c:
            n = walk.counts(c, tube)
            wanted = walk.STATES if state == "all" else (state,)
            rows: list[dict[str, Any]] = []
            missing: list[str] = []
            for s in wanted:
                if s in ("ready", "buried"):
                    got = walk.borrow(self._client, tube, s, limit + 1)
                elif s == "delayed":
                    got = walk.delayed_head(c, tube)
                else:
                    got = []
                rows += got
                if n[s] > len(got):
                    missing.append(f"{n[s] - len(got)} {s}")
        rows = sorted((r for r in rows if int(r["id"]) > after), key=lambda r: int(r["id"]))
        page = rows[:limit]
        out: dict[str, Any] = {"tube": tube, "state": state, "jobs": page, "next": None}
        if missing or len(rows) > limit:
            out["partial"] = (f"not listed: {', '.join(missing) or 'more than --limit'} "
                              "(the beanstalkd protocol cannot list every job of a tube; "
                              "--admin lists them all)")
        return out

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

    def _walk(self, tube: str, state: str, ids: Sequence[int] | None,
              one: Callable[[Client, int], str], states: Sequence[str] = walk.PEEKABLE) -> dict[str, Any]:
        """``one`` on the jobs ``ids``, or on every job of ``tube`` in ``state`` (ready, delayed
        and buried for "all"), head by head; reserved jobs are counted as skipped."""
        if ids:
            return self._bulk(list(ids), one)
        total: dict[str, int] = {}
        with self._client() as walker, self._client() as actor:
            n = walk.counts(walker, tube)
            for s in states if state == "all" else (state,):
                if s == "reserved":
                    continue
                got = walk.take_heads(walker, tube, s, n[s], lambda jid: one(actor, jid))
                for k, v in got.items():
                    total[k] = total.get(k, 0) + v
            if state in ("all", "reserved") and n["reserved"]:
                total["skipped_reserved"] = n["reserved"]
        return {"requested": sum(total.values()), "outcomes": total}

    def delete(self, tube: str, state: str, ids: Sequence[int] | None) -> dict[str, Any]:
        def one(c: Client, jid: int) -> str:
            c.delete(jid)
            return "deleted"

        return self._walk(tube, state, ids, one)

    def kick(self, tube: str, state: str, ids: Sequence[int] | None) -> dict[str, Any]:
        def one(c: Client, jid: int) -> str:
            c.kick_job(jid)
            return "kicked"

        return self._walk(tube, state, ids, one, states=("delayed", "buried"))

    def move(self, tube: str, state: str, ids: Sequence[int] | None, to: str) -> dict[str, Any]:
        if not ids and to == tube:
            return {"requested": 0, "outcomes": {}, "new_ids": {}}
        new_ids: dict[str, int] = {}
        letters = self._letters() if ids or state in ("buried", "all") else {}

        def one(c: Client, jid: int) -> str:
            st = c.stats_job(jid)
            was = st.get("state")
            if was == "reserved":
                return "skipped_reserved"
            if st.get("tube") == to:
                return "same_tube"
            # held while it is copied, so no worker runs it meanwhile (a buried job cannot run)
            body = c.peek(jid).body if was == "buried" else c.reserve_job(jid).body
            delay = int(str(st.get("time-left", 0))) if was == "delayed" else 0
            pri = int(str(st["pri"]))
            new = c.put(body, priority=pri, delay=max(0, delay), ttr=int(str(st["ttr"])), tube=to)
            if was == "buried":
                c.reserve_job(new)
                c.bury(new, priority=pri)
                if jid in letters:
                    _repoint_letter(c, letters[jid], new, to)
            c.delete(jid)
            new_ids[str(jid)] = new
            return "moved"

        out = self._walk(tube, state, ids, one)
        out["new_ids"] = new_ids
        return out

    def _letters(self) -> dict[int, Any]:
        """Dead-letter records of buried jobs, by the job's id (``stalkd failed``'s reading)."""
        from stalkd.worker.deadletter import list_failed

        return {f.record.job_id: f for f in list_failed(self.address, FAILED_TUBE, timeout=self.timeout)}

    def pause(self, tube: str, seconds: int) -> dict[str, Any]:
        with self._client() as c:
            try:
                c.pause_tube(tube, seconds)
            except errors.NotFound:
                return {"tube": tube, "paused": False, "error": "no such tube"}
        return {"tube": tube, "paused": seconds > 0, "seconds": seconds}


def _repoint_letter(c: Client, failed: Any, new_id: int, tube: str) -> None:
    """A moved dead-lettered job keeps its record (error, traceback, attempts): put again
    naming its new id and tube, with the old record's priority and TTR, the old one deleted."""
    from dataclasses import replace

    try:
        st = c.stats_job(failed.record_id)
    except errors.NotFound:
        return
    body = replace(failed.record, job_id=new_id, tube=tube).to_json()
    c.put(body, priority=int(str(st["pri"])), ttr=int(str(st["ttr"])), tube=FAILED_TUBE)
    c.delete(failed.record_id)


Backend = ApiBackend | ProtocolBackend
