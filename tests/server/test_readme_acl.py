"""README's "On a network" section run as written (issue 31): its openssl commands make the
certificates, its ACL example is the ACL file, its `stalkd serve` flags start the server (on port
0 and a temporary socket instead of fixed addresses), and a worker started with its environment
variables serves a producer end to end: a result, a failing job dead-lettered, a cancel."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from server.tlsutil import Stalkd, start
from stalkd.client import Client
from support import log_tail, popen_logged, require_binary, wait_until

README = Path(__file__).resolve().parents[2] / "README.md"


def _section() -> str:
    text = README.read_text()
    start_at = text.index("## On a network: TLS, client certificates, an ACL")
    return text[start_at:text.index("\n## ", start_at + 1)]


def _blocks(lang: str) -> list[str]:
    """The section's fenced ``lang`` blocks, dedented (the ACL one sits in a list item)."""
    out = []
    for indent, body in re.findall(rf"^( *)```{lang}\n(.*?)^ *```", _section(), re.S | re.M):
        out.append("".join(line[len(indent):] + "\n" for line in body.splitlines()))
    return out


APP = '''
import os, pathlib, time
from stalkd.worker import App, JobCancelled, NonRetryable, cancelled

app = App(os.environ.get("APP_ADDRESS", "127.0.0.1:1"), result_ttl=600)  # the worker's -a replaces it

@app.task(tube="emails")
def send(to):
    return {"sent": to}

@app.task(tube="emails")
def bounce(to):
    raise NonRetryable("mailbox full")

@app.task(tube="emails")
def slow(to):
    pathlib.Path(os.environ["STATE_DIR"], "slow-started").touch()
    while not cancelled():
        time.sleep(0.01)  # a handler's own work loop, checking for a stop request
    raise JobCancelled("stopped on request")
'''


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Path, Stalkd]]:
    require_binary("openssl")
    (openssl,) = [b for b in _blocks("sh") if "openssl req" in b]
    subprocess.run(["bash", "-euo", "pipefail", "-c", openssl], cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)
    (acl,) = _blocks("toml")
    (tmp_path / "acl.toml").write_text(acl)
    (serve,) = [b for b in _blocks("sh") if b.startswith("stalkd serve")]
    args = shlex.split(serve.replace("\\\n", " "))[2:]
    swapped = {"0.0.0.0:11400": "127.0.0.1:0", "/run/stalkd/stalkd.sock": str(tmp_path / "stalkd.sock")}
    files = {"--dir", "--tls-cert", "--tls-key", "--tls-client-ca", "--acl"}
    flags = [swapped.get(a, str(tmp_path / a) if prev in files else a)
             for prev, a in zip(["", *args[:-1]], args, strict=True)]
    s = start(*flags)
    yield tmp_path, s
    s.stop()


def _producer_app(d: Path, address: str) -> ModuleType:
    os.environ["APP_ADDRESS"] = address
    try:
        spec = importlib.util.spec_from_file_location("readme_mailapp", d / "mailapp.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        del os.environ["APP_ADDRESS"]
    return mod


@contextlib.contextmanager
def _worker_and_producer(d: Path, s: Stalkd, env: dict[str, str],
                         mode: str = "threads") -> Iterator[tuple[Path, ModuleType]]:
    """``stalkd worker`` with the environment ``env`` (STALKD_*), its log, and the producer's app."""
    (d / "mailapp.py").write_text(APP)
    port = s.tls.rpartition(":")[2]
    # this server's address; its certificate names queue.example.org, as the README's does
    env = {**env, "STALKD_ADDR": f"tls://127.0.0.1:{port}?name=queue.example.org"}
    log = d / "worker.log"
    worker = popen_logged([sys.executable, "-m", "stalkd.cli", "worker", "mailapp:app", "-c", "2", "-m", mode], log,
                          cwd=d, env={**os.environ, **env, "STATE_DIR": str(d),
                                      "PYTHONPATH": os.pathsep.join([str(d), os.environ.get("PYTHONPATH", "")])})
    try:
        yield log, _producer_app(d, f"tls://127.0.0.1:{port}?ca={d}/ca.pem&cert={d}/producer.pem"
                                    f"&key={d}/producer.key&name=queue.example.org")
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_the_readme_set_up_runs_a_producer_and_a_worker_end_to_end(setup: tuple[Path, Stalkd]) -> None:
    d, s = setup
    (exports,) = [b for b in _blocks("sh") if b.startswith("export STALKD_ADDR")]
    with _worker_and_producer(d, s, dict(re.findall(r"(STALKD_\w+)=(\S+)", exports))) as (log, mail):
        # a result, read back by the producer
        ok = mail.send.put("ana@example.org")
        assert ok.result(timeout=30) == {"sent": "ana@example.org"}
        assert ok.status() == "done"
        # a failing job: dead-lettered (a record in stalkd.failed, the job buried), its failure kept
        bad = mail.bounce.put("bob@example.org")
        wait_until(lambda: bad.status() == "buried", "the failing job buried")
        with Client(s.address) as plain:  # the README's plain listener, on loopback
            assert int(plain.stats_tube("stalkd.failed")["current-jobs-ready"]) == 1
            assert plain.stats_job(bad)["state"] == "buried"
        # a cancel of a running job
        slow = mail.slow.put("cy@example.org")
        wait_until(lambda: (d / "slow-started").exists(), "the slow job running")
        assert mail.app.cancel(slow, running=True, wait=20)
        wait_until(lambda: slow.status() != "reserved", "the cancelled job gone")
        assert mail.app.job_state(int(slow)) is None
        # nothing was refused on the way, and nothing looped
        text = log.read_text()
        assert "Traceback" not in text and "PERMISSION_DENIED" not in text, log_tail(log)
        with Client(s.address) as plain:
            assert int(plain.stats_job(bad)["reserves"]) == 1


@pytest.mark.parametrize("mode", ["threads", "asyncio", "processes"])
def test_a_worker_refused_by_the_acl_says_once_what_to_add_and_never_loops_a_job(
        setup: tuple[Path, Stalkd], mode: str) -> None:
    d, s = setup
    # the ACL before roles: the worker may only watch its tube, so its dead letters are refused
    acl = (d / "acl.toml").read_text().replace('worker = ["emails"]', 'watch = ["emails"]')
    (d / "acl.toml").write_text(acl)
    s.proc.send_signal(signal.SIGHUP)
    s.wait_log(r"SIGHUP: reloaded")
    env = {"STALKD_TLS_CA": "ca.pem", "STALKD_TLS_CERT": "worker-1.pem", "STALKD_TLS_KEY": "worker-1.key"}
    with _worker_and_producer(d, s, env, mode) as (log, mail):
        bad = mail.bounce.put("bob@example.org")
        wait_until(lambda: mail.app.job_state(int(bad)) == "buried", "the refused job buried")
        wait_until(lambda: f"job {bad} buried" in log.read_text(), "the bury logged")
        # the cancel thread is refused its tube too: said, and it lives on
        wait_until(lambda: "watch stalkd.cancel.idle (the cancel thread)" in log.read_text(),
                   "the cancel thread's refusal logged")
        text = log.read_text()
        # said once, naming what was refused and the exact entry to add
        assert text.count("put into stalkd.failed") == 1, log_tail(log)
        assert text.count("(the cancel thread)") == 1, log_tail(log)
        assert '[identity."CN=worker-1,O=Example"]\n    worker = ["emails"]' in text
        assert "Traceback" not in text
        with Client(s.address) as plain:
            assert int(plain.stats_job(bad)["reserves"]) == 1  # run once, not looped
