"""TLS listeners, client certificates, the ACL, SIGHUP and UNIX sockets: real handshakes on
loopback with certificates the test makes, against stalkd started as a process on port 0."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.tlsutil import Certs, Stalkd, issue, make_certs, start
from stalkd.client import AsyncClient, Client, errors
from support import log_tail, popen_logged, stop_process, wait_until

ACL = """
[identity."CN=producer,O=stalkd tests"]
put = ["emails", "reports.*"]
watch = ["emails"]

[identity."CN=ops,O=stalkd tests"]
put = ["*"]
watch = ["*"]
admin = true
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_flags(certs: Certs, *more: str) -> tuple[str, ...]:
    return ("--tls-listen", "127.0.0.1:0", "--tls-cert", certs.server.cert, "--tls-key",
            certs.server.key, *more)


@pytest.fixture
def mtls(certs: Certs, tmp_path: Path) -> Iterator[Stalkd]:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    s = start(*tls_flags(certs, "--tls-client-ca", certs.ca.cert, "--acl", str(acl)))
    yield s
    s.stop()


def addr(s: Stalkd, certs: Certs, who: str | None = "producer", ca: str | None = None) -> str:
    a = f"tls://{s.tls}?ca={ca or certs.ca.cert}"
    if who is not None:
        pair = getattr(certs, who)
        a += f"&cert={pair.cert}&key={pair.key}"
    return a


def test_serve_on_port_0_logs_the_port_it_got() -> None:
    # issue 15: `stalkd serve -p 0` logged port 0
    s = start()
    try:
        assert s.port != 0
        with Client(s.address) as c:
            assert c.stats()["current-connections"] == 1
    finally:
        s.stop()


def test_mutual_tls_round_trip_and_identity_in_the_log(mtls: Stalkd, certs: Certs) -> None:
    with Client(addr(mtls, certs)) as c:
        c.use("emails")
        jid = c.put(b"hello")
        c.watch("emails")
        c.ignore("default")
        job = c.reserve(timeout=0)
        assert (job.id, job.body) == (jid, b"hello")
        c.delete(job)
    mtls.wait_log(r"over TLS on 127\.0\.0\.1:\d+ as CN=producer,O=stalkd tests")

    async def run() -> bytes:
        async with AsyncClient(addr(mtls, certs, "ops")) as ac:
            await ac.use("reports.daily")
            jid = await ac.put(b"async")
            return (await ac.peek(jid)).body

    assert asyncio.run(run()) == b"async"


def _total_jobs(s: Stalkd) -> int:
    with Client(s.address) as c:
        return int(c.stats()["total-jobs"])


def test_a_client_without_a_certificate_is_refused(mtls: Stalkd, certs: Certs) -> None:
    with pytest.raises(errors.ClientConnectionError), Client(addr(mtls, certs, who=None)) as c:
        c.use("emails")
        c.put(b"sneaky")
    assert _total_jobs(mtls) == 0


def test_a_certificate_of_another_ca_is_refused(mtls: Stalkd, certs: Certs) -> None:
    stranger = addr(mtls, certs, who="stranger")
    with pytest.raises(errors.ClientConnectionError), Client(stranger) as c:
        c.use("emails")
        c.put(b"sneaky")
    assert _total_jobs(mtls) == 0


def test_a_server_signed_by_an_unknown_ca_is_refused_by_the_client(mtls: Stalkd, certs: Certs) -> None:
    with pytest.raises(errors.ConnectionFailed, match="certificate verify failed"):
        Client(addr(mtls, certs, ca=certs.other_ca.cert))


def test_acl_allows_put_to_one_tube_and_denies_another(mtls: Stalkd, certs: Certs) -> None:
    with Client(addr(mtls, certs)) as c:
        c.use("emails")
        c.put(b"ok")
        c.use("reports.weekly")
        c.put(b"ok too")
        c.use("payroll")
        with pytest.raises(errors.PermissionDenied):
            c.put(b"no")
        # the connection is still in step after a refusal
        with pytest.raises(errors.PermissionDenied):
            c.watch("payroll")
        with pytest.raises(errors.PermissionDenied):  # still watching "default"
            c.reserve(timeout=0)
        with pytest.raises(errors.PermissionDenied):
            c.kick(1)
        with pytest.raises(errors.PermissionDenied):
            c.pause_tube("emails", 10)
        assert "emails" in c.list_tubes()  # metadata stays readable
        c.use("emails")
        jid = c.put(b"mine")
    with Client(addr(mtls, certs, "ops")) as ops:
        ops.use("payroll")
        secret = ops.put(b"salaries")
        assert ops.kick(1) == 0
    with Client(addr(mtls, certs)) as c:
        with pytest.raises(errors.PermissionDenied):
            c.peek(secret)
        with pytest.raises(errors.PermissionDenied):
            c.delete(secret)
        with pytest.raises(errors.NotFound):  # no such job: the usual answer
            c.delete(10_000)
        assert c.peek(jid).body == b"mine"
    # the plain listener of the same server is unchanged: no ACL there
    with Client(mtls.address) as plain:
        plain.use("payroll")
        plain.put(b"plain")
        assert plain.stats_tube("payroll")["current-jobs-ready"] == 2
        assert plain.stats_tube("emails")["current-jobs-ready"] == 2
        assert plain.kick(5) == 0


def _peer_serial(s: Stalkd, certs: Certs) -> int:
    ctx = ssl.create_default_context(cafile=certs.ca.cert)
    ctx.load_cert_chain(certs.producer.cert, certs.producer.key)
    host, _, port = s.tls.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    out = subprocess.run(["openssl", "x509", "-inform", "der", "-noout", "-serial"], input=der,
                         capture_output=True, check=True).stdout
    return int(out.decode().strip().split("=")[1], 16)


def _serial(pem: str) -> int:
    out = subprocess.run(["openssl", "x509", "-in", pem, "-noout", "-serial"], capture_output=True,
                         check=True).stdout
    return int(out.decode().strip().split("=")[1], 16)


def test_sighup_swaps_the_certificate_for_new_connections(certs: Certs, tmp_path: Path) -> None:
    live = Certs(tmp_path, certs.ca, issue(tmp_path, certs.ca, "live", "/CN=localhost", server=True),
                 certs.producer, certs.ops, certs.stranger, certs.other_ca)
    s = start(*tls_flags(live, "--tls-client-ca", certs.ca.cert))
    try:
        first = _serial(live.server.cert)
        assert _peer_serial(s, certs) == first
        before = Client(addr(s, certs))  # a connection made before the reload
        before.use("t")
        renewed = issue(tmp_path, certs.ca, "renewed", "/CN=localhost", server=True)
        shutil.copy(renewed.cert, live.server.cert)
        shutil.copy(renewed.key, live.server.key)
        s.proc.send_signal(signal.SIGHUP)
        s.wait_log(r"SIGHUP: reloaded TLS certificates")
        assert _peer_serial(s, certs) == _serial(renewed.cert) != first
        assert before.put(b"still here") > 0  # old connections carry on
        before.close()
        # a broken file is refused and the running certificate stays
        Path(live.server.key).write_text("not a key\n")
        s.proc.send_signal(signal.SIGHUP)
        s.wait_log(r"SIGHUP: reload refused")
        assert _peer_serial(s, certs) == _serial(renewed.cert)
    finally:
        s.stop()


def test_unix_sockets_get_their_mode_and_are_removed_at_exit(tmp_path: Path) -> None:
    default, narrow = tmp_path / "a.sock", tmp_path / "b.sock"
    s = start("--unix", str(default), plain=("-l", f"unix:{narrow}", "--socket-mode", "0600"))
    try:
        assert stat.S_IMODE(os.stat(narrow).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(default).st_mode) == 0o600
        with Client(f"unix:{default}") as c:
            assert c.list_tubes() == ["default"]
    finally:
        s.stop()
    assert s.proc.returncode == 0
    assert not default.exists() and not narrow.exists()
    s = start(plain=("-l", f"unix:{default}"))  # the default mode: owner and group only
    try:
        assert stat.S_IMODE(os.stat(default).st_mode) == 0o660
    finally:
        s.stop()
    assert not default.exists()


def test_cli_speaks_tls_with_flags_and_environment(mtls: Stalkd, certs: Certs) -> None:
    env = {**os.environ, "STALKD_ADDR": f"tls://{mtls.tls}", "STALKD_TLS_CA": certs.ca.cert,
           "STALKD_TLS_CERT": certs.producer.cert, "STALKD_TLS_KEY": certs.producer.key}
    run = [sys.executable, "-m", "stalkd.cli"]
    p = subprocess.run([*run, "put", "-t", "emails", "via-env"], env=env, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([*run, "put", "-t", "payroll", "x"], env=env, capture_output=True, timeout=60)
    assert p.returncode == 4 and b"PERMISSION_DENIED" in p.stderr
    del env["STALKD_TLS_CERT"], env["STALKD_TLS_KEY"]
    p = subprocess.run([*run, "peek", "--ready", "-t", "emails", "--tls-cert", certs.ops.cert,
                        "--tls-key", certs.ops.key, "--body"], env=env, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b"via-env", p.stderr
    p = subprocess.run([*run, "failed", "--tls-cert", certs.ops.cert, "--tls-key", certs.ops.key],
                       env=env, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr



WORKER_APP = """
import os, pathlib
from stalkd.worker import App

app = App(os.environ.get("APP_ADDRESS", "127.0.0.1:1"))  # the worker's -a replaces it

@app.task(tube="emails")
def send(name):
    (pathlib.Path(os.environ["STATE_DIR"]) / name).touch()
"""


def test_worker_and_producer_over_mutual_tls(mtls: Stalkd, certs: Certs, tmp_path: Path) -> None:
    (tmp_path / "tlsapp.py").write_text(WORKER_APP)
    env = {**os.environ, "STATE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    # Given a job put through the task's own producer API over TLS
    put = subprocess.run([sys.executable, "-c", "import tlsapp; tlsapp.send.put('done-1')"],
                         env={**env, "APP_ADDRESS": addr(mtls, certs, "ops")}, capture_output=True,
                         timeout=60)
    assert put.returncode == 0, put.stderr
    # When a worker runs with a tls:// address and the TLS flags
    log = tmp_path / "worker.log"
    proc = popen_logged([sys.executable, "-m", "stalkd.cli", "worker", "tlsapp:app",
                         "-a", f"tls://{mtls.tls}", "--tls-ca", certs.ca.cert,
                         "--tls-cert", certs.ops.cert, "--tls-key", certs.ops.key],
                        log, cwd=tmp_path, env=env)
    try:
        # Then the task runs (its file appears) and the connection was a TLS one as ops
        mtls.wait_log(r"over TLS on .* as CN=ops,O=stalkd tests")
        wait_until(lambda: (tmp_path / "done-1").exists() or proc.poll() is not None, "the first client to finish")
        assert (tmp_path / "done-1").exists(), log_tail(log)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_tls_client_times_out_on_a_stalled_server(mtls: Stalkd, certs: Certs) -> None:
    # a kernel receive timeout never fires under TLS (the read is retried): the client must
    # still give up after its timeout and drop the connection
    c = Client(addr(mtls, certs), timeout=0.3)
    c.stats()
    stop_process(mtls.proc.pid)
    try:
        with pytest.raises(errors.ReplyTimeout):
            c.stats()
    finally:
        mtls.proc.send_signal(signal.SIGCONT)
    assert c.stats()["current-connections"] >= 1  # reconnected
    c.close()


def test_spark_sink_puts_rows_over_mutual_tls(mtls: Stalkd, certs: Certs) -> None:
    # the sink's per-partition writer, run directly (no Spark session needed for one partition)
    pytest.importorskip("pyspark")
    from stalkd.spark.sink import JobDefaults, SinkError, put_rows

    rows = iter([{"payload": b"a"}, {"payload": "b"}])
    done = put_rows(addr(mtls, certs), rows, "payload", ["payload"], JobDefaults(tube="emails"))
    assert done.rows == 2
    with Client(mtls.address) as plain:
        assert plain.stats_tube("emails")["current-jobs-ready"] == 2
    with pytest.raises(SinkError, match="PERMISSION_DENIED"):
        put_rows(addr(mtls, certs), iter([{"payload": b"x"}]), "payload", ["payload"],
                 JobDefaults(tube="payroll"))


def test_sighup_reloads_the_acl_for_open_connections_too(certs: Certs, tmp_path: Path) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    s = start(*tls_flags(certs, "--tls-client-ca", certs.ca.cert, "--acl", str(acl)))
    try:
        with Client(addr(s, certs)) as c:
            c.use("payroll")
            with pytest.raises(errors.PermissionDenied):
                c.put(b"no")
            acl.write_text(ACL.replace('put = ["emails", "reports.*"]', 'put = ["payroll"]'))
            s.proc.send_signal(signal.SIGHUP)
            s.wait_log(r"SIGHUP: reloaded TLS certificates, ACL")
            assert c.put(b"now allowed") > 0
            c.use("emails")
            with pytest.raises(errors.PermissionDenied):
                c.put(b"no longer")
    finally:
        s.stop()
