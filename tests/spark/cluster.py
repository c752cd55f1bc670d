"""Real peers for the cluster tests, started and stopped by PID: a Spark standalone cluster
(one master, two workers, each its own JVM, from the pip pyspark), a driver application on it
that serves the tests' requests (``cluster_job.py``), and moto's S3 API server.

Every listener binds port 0 and the fixture reads the bound port from the process's own log
line ("Starting Spark master at spark://127.0.0.1:PORT", " * Running on http://127.0.0.1:PORT"),
so no port is picked and then bound. Each process runs in a session of its own: stopping it
signals that process group (the worker's executors and their Python workers go with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START_TIMEOUT = 180.0  # a JVM under a loaded 2-core machine takes 10-40 s to listen


@dataclass
class Peer:
    """A started process, its log file, and what was read from the log."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    found: re.Match[str] | None = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        else:
            # The leader is gone; children it left behind in its group are ours to end too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


def start(name: str, argv: list[str], log_path: Path, pattern: str, env: dict[str, str] | None = None,
          timeout: float = START_TIMEOUT) -> Peer:
    """Start ``argv`` (own process group, output to ``log_path``) and wait for ``pattern`` in its log."""
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True)
    peer = Peer(name, proc, log_path)
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout
    try:
        while True:
            m = rx.search(peer.log_text())
            if m:
                peer.found = m
                return peer
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{peer.log_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: no {pattern!r} in its log after {timeout:.0f} s:\n"
                                   f"{peer.log_text()[-4000:]}")
            time.sleep(0.1)  # polling the log for the line, not a stand-in for it
    except BaseException:
        peer.stop()
        raise


def spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


DAEMON_ENV = {
    "SPARK_DAEMON_MEMORY": "256m",
    "SPARK_LOCAL_IP": "127.0.0.1",
    # No REST submission server (it would bind the fixed port 6066).
    "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    "PYSPARK_PYTHON": sys.executable,
}


@dataclass
class SparkCluster:
    """A standalone master and its workers; ``url`` is what a driver passes as its master."""

    url: str
    master: Peer
    workers: list[Peer] = field(default_factory=list)

    def add_worker(self, work_dir: Path, *, cores: int = 1, memory: str = "1g",
                   env: dict[str, str] | None = None) -> Peer:
        i = len(self.workers)
        work_dir.mkdir(parents=True, exist_ok=True)
        peer = start(f"spark worker {i}",
                     [spark_class(), "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                      "--port", "0", "--webui-port", "0", "--cores", str(cores), "--memory", memory,
                      "--work-dir", str(work_dir)],
                     work_dir.parent / f"worker-{i}.log", r"Successfully registered with master",
                     env={**DAEMON_ENV, **(env or {})})  # fmt: skip
        self.workers.append(peer)
        return peer

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        self.master.stop()


def start_spark_cluster(root: Path, workers: int = 2, env: dict[str, str] | None = None) -> SparkCluster:
    """A master on 127.0.0.1 (port read from its log) and ``workers`` one-core workers."""
    root.mkdir(parents=True, exist_ok=True)
    master = start("spark master",
                   [spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", "0", "--webui-port", "0"],
                   root / "master.log", r"Starting Spark master at (spark://127\.0\.0\.1:\d+)",
                   env=DAEMON_ENV)  # fmt: skip
    assert master.found is not None
    cluster = SparkCluster(master.found.group(1), master)
    try:
        for i in range(workers):
            cluster.add_worker(root / f"work-{i}", env=env)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@dataclass
class S3Server:
    """moto's S3 API server; ``env`` holds the AWS variables that point a client at it."""

    endpoint: str
    peer: Peer

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}  # fmt: skip

    def create_bucket(self, name: str) -> None:
        import pyarrow.fs as pafs

        host = self.endpoint.split("://", 1)[1]
        fs = pafs.S3FileSystem(endpoint_override=host, scheme="http", access_key="testing",
                               secret_key="testing", region="us-east-1", allow_bucket_creation=True)  # fmt: skip
        fs.create_dir(name)

    def stop(self) -> None:
        self.peer.stop()


def start_s3(root: Path) -> S3Server:
    root.mkdir(parents=True, exist_ok=True)
    exe = str(Path(sys.executable).with_name("moto_server"))
    peer = start("moto S3 server", [exe, "-H", "127.0.0.1", "-p", "0"], root / "moto.log",
                 r"Running on (http://127\.0\.0\.1:\d+)", timeout=60)
    assert peer.found is not None
    return S3Server(peer.found.group(1), peer)


class ClusterDriver:
    """``cluster_job.py`` running as a driver against a cluster's master, shared by every
    cluster test (one application: its driver and executors start once); see its docstring."""

    def __init__(self, master: str, log_path: Path, executors: int = 2) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("cluster_job.py")), master,
                 "--executors", str(executors)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                start_new_session=True)  # fmt: skip
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self._requests = 0
        try:
            self._wait("READY", START_TIMEOUT)
        except BaseException:
            self.stop()
            raise

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)

    def _wait(self, token: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"cluster driver: no {token!r} after {timeout:.0f} s:\n"
                                   f"{self.log_path.read_text(errors='replace')[-4000:]}") from None
            if line is None:
                raise RuntimeError(f"cluster driver exited with {self.proc.wait()}:\n"
                                   f"{self.log_path.read_text(errors='replace')[-6000:]}")
            if line == token:
                return

    def request(self, out: Path, **req: Any) -> dict[str, Any]:
        """Send one request (``read=PATH, options=[...]`` or ``analyze=[ARGS]``); its answer."""
        assert self.proc.stdin is not None
        self._requests += 1
        self.proc.stdin.write(json.dumps({"id": self._requests, "out": str(out), **req}) + "\n")
        self.proc.stdin.flush()
        self._wait(f"DONE {self._requests}", 600)
        result: dict[str, Any] = json.loads(Path(out).read_text())
        assert "error" not in result, result["error"]
        return result

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # the driver's loop ends and it stops its session
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
