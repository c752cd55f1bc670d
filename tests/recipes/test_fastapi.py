"""The FastAPI recipe (docs/recipes.md) run as written: examples/fastapi_app/receipts_api.py
under a real uvicorn process (and under FastAPI's TestClient), against a real stalkd server."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import greenstalk
import pytest

from support import ServerProcess, spawn_server, wait_until

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app"


def _queue(s: ServerProcess) -> greenstalk.Client:
    return greenstalk.Client((s.host, s.port), watch="receipts")


def _connections(c: greenstalk.Client) -> int:
    return int(c.stats()["current-connections"])


def test_uvicorn_serves_puts_through_one_lifespan_client(stalkd: ServerProcess,
                                                         tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STALKD_")}
    env["STALKD_ADDR"] = stalkd.address
    log = tmp_path / "uvicorn.log"
    web = spawn_server([sys.executable, "-m", "uvicorn", "receipts_api:api", "--host",
                        "127.0.0.1", "--port", "0"], what="uvicorn", log=log, cwd=EXAMPLE, env=env)
    c = _queue(stalkd)
    try:
        with httpx.Client(base_url=f"http://{web.address}") as http:
            jobs = [http.post(f"/orders/{n}/receipt") for n in (7, 8, 9)]
        assert [r.status_code for r in jobs] == [202, 202, 202]
        ids = [r.json()["job"] for r in jobs]
        for n, jid in zip((7, 8, 9), ids, strict=True):
            job = c.peek(jid)
            assert json.loads(job.body.split("\n", 1)[1]) == {"order": n}
            assert c.stats_job(jid)["tube"] == "receipts"
            assert c.stats_job(jid)["ttr"] == 60
        assert _connections(c) == 2  # this client and the app's one queue connection
    finally:
        web.stop()  # SIGTERM: uvicorn runs the lifespan's exit, which closes the client
    wait_until(lambda: _connections(c) == 1, "the app's connection closing with the app", 10)
    web.proc.wait()
    assert "Application shutdown complete" in log.read_text()  # lifespan ran
    assert web.proc.returncode in (0, -15)  # uvicorn re-raises the SIGTERM it handled
    c.close()


@pytest.fixture
def receipts_api(stalkd: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("STALKD_ADDR", stalkd.address)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    sys.modules.pop("receipts_api", None)  # read STALKD_ADDR afresh
    return importlib.import_module("receipts_api")


def test_test_client_runs_the_lifespan(stalkd: ServerProcess, receipts_api: ModuleType) -> None:
    from fastapi.testclient import TestClient

    c = _queue(stalkd)
    with TestClient(receipts_api.api) as client:
        r = client.post("/orders/42/receipt")
        assert r.status_code == 202
        assert c.stats_job(r.json()["job"])["tube"] == "receipts"
        assert _connections(c) == 2
    # The lifespan closed its client when the app stopped; the server counts the close when it
    # reads the EOF, which may come after this line runs.
    wait_until(lambda: _connections(c) == 1, "the lifespan closing its client", 10)
    c.close()
