"""The admin endpoint of a real ``stalkd serve --admin`` process: health, metrics, JSON API."""

from __future__ import annotations

import os
import re

import greenstalk
import pytest

from admin.adminproc import AdminServer, start_admin_server
from stalkd.server.config import parse_args


def _client(srv: AdminServer, tube: str = "emails") -> greenstalk.Client:
    return greenstalk.Client(("127.0.0.1", srv.port), use=tube, watch=tube)


def _metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    assert m is not None, f"{name}{labels} not in /metrics"
    return float(m.group(1))


def test_health_and_readiness(server: AdminServer) -> None:
    assert server.request("GET", "/healthz") == (200, "ok\n")
    assert server.request("GET", "/readyz") == (200, "ready\n")


def test_metrics_reflect_the_engine_at_scrape_time(server: AdminServer) -> None:
    # Given three jobs put, one reserved and deleted, one buried
    c = _client(server)
    for i in range(3):
        c.put(f"job {i}")
    c.delete(c.reserve())
    c.bury(c.reserve())
    # When /metrics is scraped
    status, text = server.request("GET", "/metrics")
    # Then the per-tube gauges, command counters and histograms say so
    assert status == 200
    assert _metric(text, "stalkd_tube_jobs", '{state="ready",tube="emails"}') == 1
    assert _metric(text, "stalkd_tube_jobs", '{state="buried",tube="emails"}') == 1
    assert _metric(text, "stalkd_commands_total", '{command="put"}') == 3
    assert _metric(text, "stalkd_job_wait_seconds_count") == 2
    assert _metric(text, "stalkd_job_run_seconds_count") == 1
    assert _metric(text, "stalkd_fsync_duration_seconds_count") >= 1
    assert _metric(text, "stalkd_fsync_records_sum") >= 5  # 3 puts, a delete, a bury
    assert _metric(text, "stalkd_wal_bytes") > 0
    assert _metric(text, "stalkd_connections") == 1
    assert "# TYPE stalkd_disk_full_refusals_total counter" in text or \
        "# TYPE stalkd_disk_full_refusals counter" in text
    c.close()


def test_list_jobs_pages_by_id(server: AdminServer) -> None:
    c = _client(server)
    ids = [c.put(f"body-{i}-" + "x" * 100, priority=i) for i in range(5)]
    first = server.get("/api/v1/tubes/emails/jobs?state=ready&limit=2")
    assert [j["id"] for j in first["jobs"]] == ids[:2]
    assert first["jobs"][0]["body"].startswith("body-0-") and first["jobs"][0]["truncated"]
    assert first["jobs"][0]["size"] == len("body-0-") + 100
    rest = server.get(f"/api/v1/tubes/emails/jobs?state=ready&after={first['next']}&limit=10")
    assert [j["id"] for j in rest["jobs"]] == ids[2:] and rest["next"] is None
    assert server.request("GET", "/api/v1/tubes/emails/jobs?state=nonsense")[0] == 400
    c.close()


def test_job_view_shows_its_dead_letter(server: AdminServer) -> None:
    from stalkd.worker.actions import DeadLetter

    c = _client(server)
    jid = c.put("payload")
    c.bury(c.reserve())
    rec = DeadLetter(job_id=jid, tube="emails", task="send", attempts=3,
                     error="ValueError('bad address')", traceback="Traceback ...\nValueError",
                     failed_at=1.0, body=b"payload")
    f = _client(server, "stalkd.failed")
    f.put(rec.to_json().decode())
    job = server.get(f"/api/v1/jobs/{jid}")
    assert job["state"] == "buried" and job["body"] == "payload"
    assert job["dead_letter"]["error"] == "ValueError('bad address')"
    assert job["dead_letter"]["traceback"].startswith("Traceback")
    listed = server.get("/api/v1/buried")["jobs"]
    assert [(j["id"], j["error"]) for j in listed] == [(jid, "ValueError('bad address')")]
    assert server.request("GET", "/api/v1/jobs/999999")[0] == 404
    c.close()
    f.close()


def test_mutations_are_durable_before_the_reply(tmp_path: os.PathLike[str]) -> None:
    data = os.path.join(str(tmp_path), "data")
    srv = start_admin_server("--dir", data)
    try:
        c = _client(srv)
        ids = [c.put(f"j{i}") for i in range(6)]
        for _ in range(3):
            c.bury(c.reserve())  # ids[0..2] buried
        c.close()
        # When the API deletes two, kicks one, moves one and pauses a tube, then the server dies
        assert srv.post("/api/v1/jobs/delete", {"ids": ids[:2]})["outcomes"] == {"deleted": 2}
        assert srv.post("/api/v1/jobs/kick", {"tube": "emails", "state": "buried"})["outcomes"] == {"kicked": 1}
        moved = srv.post("/api/v1/jobs/move", {"ids": [ids[5]], "to": "archive"})
        new_id = moved["new_ids"][str(ids[5])]
        srv.kill9()
    finally:
        srv.stop()
    # Then a restarted server has every change
    srv = start_admin_server("--dir", data)
    try:
        jobs = srv.get("/api/v1/tubes/emails/jobs?state=all")["jobs"]
        assert sorted((j["id"], j["state"]) for j in jobs) == [
            (ids[2], "ready"), (ids[3], "ready"), (ids[4], "ready")]
        archived = srv.get("/api/v1/tubes/archive/jobs")["jobs"]
        assert [(j["id"], j["body"]) for j in archived] == [(new_id, "j5")]
    finally:
        srv.stop()


def test_move_keeps_buried_and_delayed_states(server: AdminServer) -> None:
    c = _client(server)
    buried = c.put("b")
    c.bury(c.reserve())
    delayed = c.put("d", delay=600)
    out = server.post("/api/v1/jobs/move", {"tube": "emails", "state": "all", "to": "elsewhere"})
    assert out["outcomes"] == {"moved": 2}
    rows = {j["body"]: j for j in server.get("/api/v1/tubes/elsewhere/jobs")["jobs"]}
    assert rows["b"]["state"] == "buried" and rows["b"]["id"] == out["new_ids"][str(buried)]
    assert rows["d"]["state"] == "delayed" and 590 <= rows["d"]["time_left"] <= 600
    assert out["new_ids"][str(delayed)] == rows["d"]["id"]
    assert server.get("/api/v1/tubes/emails/jobs")["jobs"] == []
    c.close()


def test_pause_and_resume_a_tube(server: AdminServer) -> None:
    c = _client(server)
    c.put("x")
    assert server.post("/api/v1/tubes/emails/pause", {"seconds": 100})["paused"] is True
    assert server.get("/api/v1/tubes/emails")["paused"] is True
    with pytest.raises(greenstalk.TimedOutError):
        c.reserve(timeout=0)
    server.post("/api/v1/tubes/emails/pause", {"seconds": 0})
    assert c.reserve(timeout=0).body == "x"
    c.close()


def test_reserved_jobs_are_left_to_their_worker(server: AdminServer) -> None:
    c = _client(server)
    c.put("held")
    held = c.reserve()
    out = server.post("/api/v1/jobs/delete", {"tube": "emails", "state": "all"})
    assert out["outcomes"] == {"skipped_reserved": 1}
    c.delete(held)
    c.close()


def test_bad_requests_get_clear_errors(server: AdminServer) -> None:
    assert server.request("POST", "/api/v1/jobs/delete", {"nothing": 1})[0] == 400
    status, body = server.request("POST", "/api/v1/jobs/delete", None,
                                  {"Content-Type": "text/plain"})
    assert status == 415 and "JSON" in body["error"]
    assert server.request("POST", "/api/v1/jobs/move", {"ids": [1]})[0] == 400
    assert server.request("POST", "/api/v1/tubes/x/pause", {"seconds": "ten"})[0] == 400
    # A page of another site cannot reach the API by renaming itself (DNS rebinding)
    assert server.request("GET", "/api/v1/overview", headers={"Host": "evil.example"})[0] == 403
    # an IPv6 loopback name is its own browser's, with or without a port (issue 31)
    for host in ("[::1]:11301", "[::1]", "localhost:11301"):
        assert server.request("GET", "/api/v1/overview", headers={"Host": host})[0] == 200, host
    assert server.request("GET", "/api/v1/overview", headers={"Host": "[::1.evil.example]"})[0] == 403


def test_token_required_off_loopback_and_checked(tmp_path: os.PathLike[str]) -> None:
    # A non-loopback admin address without a token is refused at start
    got = parse_args(["--admin", "0.0.0.0:0"])
    assert getattr(got, "code", None) == 5 and "--admin-token-file" in got.stderr  # type: ignore[union-attr]
    # With a token file (0600) every API call needs the bearer token; probes stay open
    path = os.path.join(str(tmp_path), "token")
    token = "s3cret-token-0123456789"
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(token + "\n")
    srv = start_admin_server("--admin-token-file", path, token=token)
    try:
        assert srv.get("/api/v1/overview")["server"]["jobs"] == 0
        assert srv.request("GET", "/api/v1/overview", headers={"Authorization": "Bearer nope"})[0] == 401
        assert srv.request("GET", "/healthz", headers={"Authorization": ""})[0] == 200
    finally:
        srv.stop()
    # A token others can read is refused: the server does not start
    os.chmod(path, 0o644)
    with pytest.raises(RuntimeError, match="group or others"):
        start_admin_server("--admin-token-file", path, timeout=20)


def test_the_api_root_lists_its_routes_and_each_answers(server: AdminServer) -> None:
    # When a person opens /api/v1/ (or /api/v1)
    for root in ("/api/v1/", "/api/v1"):
        routes = server.get(root)["routes"]
        # Then it lists every route of the JSON API with its method and what it does
        paths = {(r["method"], r["path"]) for r in routes}
        assert ("GET", "/api/v1/overview") in paths and ("POST", "/api/v1/jobs/move") in paths
        assert all(r["about"] for r in routes)
    # and every GET route listed without a parameter answers
    for r in routes:
        if r["method"] == "GET" and "{" not in r["path"]:
            status, _ = server.request("GET", r["path"])
            assert status == 200, r


def test_docs_admin_lists_the_routes_the_server_registers() -> None:
    import re
    from pathlib import Path

    from stalkd.admin.http import API, API_ROUTES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "admin.md").read_text()
    rows = set(re.findall(r"^\| (GET|POST) \| `(/api/v1/[^`]+)` \|", doc, re.M))
    assert rows == {(m, API + p) for m, p, _ in API_ROUTES}
