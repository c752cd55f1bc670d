"""The admin endpoint's HTTP app (aiohttp, on the server's own event loop).

Routes::

    GET  /healthz                       200 while the process runs
    GET  /readyz                        200 when serving; 503 with reasons otherwise
    GET  /metrics                       Prometheus text (see metrics.py)
    GET  /api/v1/                       the JSON API's routes, from ``API_ROUTES`` (below)
    GET  /                              the dashboard (static files, no build step)

Access: with a token (``--admin-token-file``) every route but /healthz, /readyz and the
dashboard's static files needs ``Authorization: Bearer TOKEN``. Without one (loopback only),
requests must name a loopback host (``Host:`` header), so a web page in the operator's browser
cannot reach the API through DNS rebinding; mutations need a JSON body either way, which a
cross-site form cannot send. With ``--admin-tls``, ``--tls-client-ca`` and ``--acl``, the
client certificate's identity must have ``admin = true`` (``Guard``).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from stalkd.admin.metrics import Instruments, Reading, TimedStorage, exposition
from stalkd.admin.ops import OVERVIEW_PAGE, AdminOps, BadRequest, answer_parts
from stalkd.admin.session import ServerBusy
from stalkd.server.config import is_loopback

if TYPE_CHECKING:
    from stalkd.server.acl import Acl
    from stalkd.server.app import Server

__all__ = ["Guard", "make_app", "DISK_FULL_WINDOW", "API_ROUTES"]

DISK_FULL_WINDOW = 10.0  # seconds after a refusal for space during which /readyz says "disk full"
_OPEN = frozenset({"/healthz", "/readyz"})
_STATIC = ("index.html", "app.js", "style.css")
API = "/api/v1"
# The JSON API, written once: registered from here, and listed by GET /api/v1/.
API_ROUTES: tuple[tuple[str, str, str], ...] = (
    ("GET", "/overview", "server counts (with its id and protocol addresses), every tube's "
                         "figures summed (totals), a page of tubes (?offset=N&limit=N, default "
                         "500; next: the next page's offset; sort=created|name|jobs|ready|"
                         "reserved|delayed|buried|waiting|puts; q=TEXT in the name; internal=0 "
                         "leaves stalkd's own tubes out), fsync/disk"),
    ("GET", "/tubes/{tube}", "one tube's counts"),
    ("GET", "/tubes/{tube}/jobs", "?state=ready|reserved|delayed|buried|all&after=ID&limit=N"),
    ("GET", "/buried", "buried jobs of every tube with their dead-letter errors"),
    ("GET", "/jobs/{id}", "one job, its body (64 KiB) and its dead-letter record"),
    ("POST", "/jobs/delete", '{"ids": [...]} or {"tube": T, "state": S}'),
    ("POST", "/jobs/kick", "the same selection"),
    ("POST", "/jobs/move", 'the same selection plus {"to": TUBE}; moved jobs get new ids'),
    ("POST", "/tubes/{tube}/pause", '{"seconds": N} (0 resumes)'),
    ("GET", "/workers", "live worker processes, their slots and running jobs (stalkd workers)"),
    ("GET", "/replication", "role, epoch, standbys and their lag (docs/standby.md)"),
    ("POST", "/promote", "{} : a standby becomes the primary (409 otherwise)"),
)


class Guard:
    """Who may use the endpoint: the bearer token, and with HTTPS, client certificates and an
    ACL, only identities the ACL lets run admin commands (``admin = true``)."""

    def __init__(self, token: str | None, acl: Acl | None = None) -> None:
        self.token = token
        self.acl = acl

    def allow(self, request: web.Request) -> str | None:
        """None when allowed, else why not (the body of the 401/403)."""
        if self.acl is not None:
            from stalkd.server.tls import identity

            who = identity(request.transport.get_extra_info("peercert") if request.transport else None)
            if not self.acl.may_admin(who):
                return f"{who or 'this client'} may not use the admin API (--acl: admin = true)"
        if self.token is not None:
            got = request.headers.get("Authorization", "")
            if not hmac.compare_digest(got.encode(), f"Bearer {self.token}".encode()):
                return "missing or wrong bearer token (Authorization: Bearer TOKEN)"
            return None
        if not is_loopback(host_name(request.host or "")):
            return f"Host {request.host!r} is not a loopback name; use 127.0.0.1 or localhost"
        return None


def host_name(header: str) -> str:
    """The host of a ``Host:`` header, without its port or an IPv6 address's brackets.

    >>> host_name("[::1]:11301"), host_name("[::1]"), host_name("localhost:80"), host_name("127.0.0.1")
    ('::1', '::1', 'localhost', '127.0.0.1')
    """
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else ""
    return header.rsplit(":", 1)[0]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data, separators=(",", ":")), status=status,
                        content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def replication_state(server: Server) -> dict[str, Any]:
    """What ``GET /api/v1/replication`` answers (and an orchestrator's health check reads)."""
    lags = server.replicas.lags() if server.replicas is not None else []
    st = server.replication.stats()
    return {
        "role": server.role.name, "epoch": server.role.state.epoch,
        "may_lead": server.role.state.may_lead, "fenced_by_epoch": st.get("fenced-by-epoch"),
        "standbys": [{"peer": p, "lag": lag, "lag_seconds": sec} for p, lag, sec in lags],
        "primary_lag": st.get("primary-lag"), "primary_lag_seconds": st.get("primary-lag-seconds"),
        "in_sync": st.get("in-sync"), "problems": server.replication.problems(),
    }  # fmt: skip


def make_app(server: Server, ops: AdminOps, ins: Instruments, storage: TimedStorage | None,
             guard: Guard) -> web.Application:
    """The aiohttp application for one server."""
    @web.middleware
    async def access(request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        if path not in _OPEN and not path.startswith("/static/") and path != "/":
            why = guard.allow(request)
            if why is not None:
                return _error(401 if guard.token else 403, why)
            if request.method == "POST" and request.content_type != "application/json":
                return _error(415, "send the request body as JSON (Content-Type: application/json)")
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except BadRequest as e:
            return _error(400, str(e))
        except ServerBusy as e:
            return _error(503, str(e))

    def ready() -> list[str]:
        why = []
        if server.failed is not None:
            why.append(f"fatal storage error: {server.failed}")
        if server.stopping:
            why.append("stopping")
        if storage is not None and time.monotonic() - storage.last_refusal < DISK_FULL_WINDOW:
            why.append("disk full: the WAL refused a command for lack of space")
        why.extend(server.replication.problems())  # fenced, waiting for standbys, not in sync
        return why

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        why = ready()
        if why:
            return web.Response(text="not ready: " + "; ".join(why) + "\n", status=503)
        return web.Response(text="ready\n")

    async def metrics(request: web.Request) -> web.Response:
        # Read on the loop (the tubes a slice per loop turn), encode in a thread: with 200
        # tubes the encoding alone held the loop ~26 ms per scrape (bench/admin_bench.py loop).
        reading = await Reading.take(server, ins, storage)
        body = await asyncio.get_running_loop().run_in_executor(None, exposition, reading)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def overview(request: web.Request) -> web.Response:
        q = request.query
        try:
            offset, limit = int(q.get("offset", "0")), int(q.get("limit", str(OVERVIEW_PAGE)))
        except ValueError:
            raise BadRequest("offset and limit must be integers") from None
        internal = q.get("internal", "1")
        if internal not in ("0", "1"):
            raise BadRequest("internal is 0 (stalkd's own tubes left out) or 1")
        data = await ops.overview(offset, limit, sort=q.get("sort", "created"), q=q.get("q", ""),
                                  internal=internal == "1")
        why = ready()
        data["ready"] = not why
        data["why"] = why
        data["replication"] = replication_state(server)
        if storage is not None:
            data["disk"] = storage.disk_usage()
            f = ins.fsync
            data["fsync"] = {"count": f.count, "seconds": f.sum}
        data["time"] = server.clock()
        return _json(data)

    async def tube(request: web.Request) -> web.Response:
        row = ops.tube(request.match_info["tube"])
        return _error(404, "no such tube") if row is None else _json(row)

    async def tube_jobs(request: web.Request) -> web.Response:
        q = request.query
        try:
            after, limit = int(q.get("after", "0")), int(q.get("limit", "100"))
        except ValueError:
            raise BadRequest("after and limit must be integers") from None
        return _json(await ops.jobs(request.match_info["tube"], q.get("state"), after, limit))

    async def buried(request: web.Request) -> web.Response:
        q = request.query.get("limit", "100")
        limit = min(int(q), 1000) if q.isdigit() else 100
        return _json({"jobs": await ops.oldest_buried(limit)})

    async def job(request: web.Request) -> web.Response:
        try:
            jid = int(request.match_info["id"])
        except ValueError:
            raise BadRequest("a job id is an integer") from None
        row = ops.job(jid)
        return _error(404, f"no job {jid}") if row is None else _json(row)

    async def body_of(request: web.Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except ValueError:
            raise BadRequest("the request body is not JSON") from None
        if not isinstance(data, dict):
            raise BadRequest("the request body must be a JSON object")
        return data

    async def selection(data: dict[str, Any]) -> list[int]:
        ids = data.get("ids")
        if ids is not None and not isinstance(ids, list):
            raise BadRequest("ids must be a list of job ids")
        return await ops.select(ids, data.get("tube"), data.get("state"))

    async def delete(request: web.Request) -> web.Response:
        return _json(await ops.delete(await selection(await body_of(request))))

    async def kick(request: web.Request) -> web.Response:
        return _json(await ops.kick(await selection(await body_of(request))))

    async def move(request: web.Request) -> web.StreamResponse:
        data = await body_of(request)
        to = data.get("to")
        if not isinstance(to, str):
            raise BadRequest("give the destination tube as \"to\"")
        out = await ops.move(await selection(data), to)
        # Written a slice of ids at a time (14.6 MB for 900k ids): never joined whole.
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        async for part in answer_parts(out):
            await response.write(part)
        await response.write_eof()
        return response

    async def pause(request: web.Request) -> web.Response:
        data = await body_of(request)
        seconds = data.get("seconds")
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise BadRequest("give \"seconds\" as an integer (0 resumes the tube)")
        return _json(await ops.pause(request.match_info["tube"], seconds))

    async def workers(request: web.Request) -> web.Response:
        return _json({"workers": await ops.workers()})

    async def replication(request: web.Request) -> web.Response:
        return _json(replication_state(server))

    async def promote(request: web.Request) -> web.Response:
        await body_of(request)  # a JSON body, as every mutation (see Access above)
        if server.promote is None or not server.role.standby:
            return _error(409, f"not a standby (role {server.role.name}, epoch {server.role.state.epoch})")
        return _json({"result": server.promote(), **replication_state(server)})

    static = resources.files("stalkd.admin") / "static"
    types = {"html": "text/html", "js": "text/javascript", "css": "text/css"}

    async def static_file(request: web.Request) -> web.Response:
        name = request.match_info.get("name", "index.html")
        if name not in _STATIC:
            return _error(404, "no such file")
        return web.Response(body=(static / name).read_bytes(),
                            content_type=types[name.rsplit(".", 1)[1]], charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    app = web.Application(middlewares=[access], client_max_size=16 * 2**20)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    handlers = {"/overview": overview, "/tubes/{tube}": tube, "/tubes/{tube}/jobs": tube_jobs,
                "/buried": buried, "/jobs/{id}": job, "/jobs/delete": delete, "/jobs/kick": kick,
                "/jobs/move": move, "/tubes/{tube}/pause": pause, "/replication": replication,
                "/workers": workers,
                "/promote": promote}
    for method, path, _ in API_ROUTES:
        app.router.add_route(method, API + path, handlers[path])

    async def routes(request: web.Request) -> web.Response:
        return _json({"routes": [{"method": m, "path": API + p, "about": about}
                                 for m, p, about in API_ROUTES]})

    app.router.add_get(API, routes)
    app.router.add_get(API + "/", routes)
    app.router.add_get("/", static_file)
    app.router.add_get("/static/{name}", static_file)
    return app
