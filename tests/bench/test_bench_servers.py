"""The benches' servers listen on port 0 and report the port the kernel gave them (no port is
picked and bound later), and answer there before a bench's first run starts."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from support import listening_ports, require_binary

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))  # after the rest: no shadowing
import server_bench as sb  # noqa: E402  (bench/server_bench.py)


def _ask(port: int, line: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(line)
        return s.recv(100)


@pytest.mark.parametrize("kind", ["stalkd", "stalkd-py", "beanstalkd"])
@pytest.mark.parametrize("klass", ["memory", "always"])
def test_a_bench_server_reports_the_port_it_listens_on(kind: str, klass: str) -> None:
    if kind == "beanstalkd":
        require_binary("beanstalkd")
    srv = sb.start(kind, klass)
    try:
        assert listening_ports(srv.proc.pid) == [srv.port]
        assert _ask(srv.port, b"use bench\r\n") == b"USING bench\r\n"
        data_dir = srv.data_dir
        assert (data_dir is None) == (klass == "memory")
    finally:
        srv.stop()
    assert srv.proc.returncode is not None
    assert data_dir is None or not os.path.exists(data_dir)  # stop() removes it


@pytest.mark.parametrize("klass", ["memory", "never", "always"])
def test_the_floor_server_listens_on_port_0_and_answers_puts(klass: str) -> None:
    srv = sb.start("floor", klass)
    try:
        assert listening_ports(srv.proc.pid) == [srv.port]
        assert _ask(srv.port, b"put 0 0 60 7\r\nhi-put!\r\n") == b"INSERTED 1\r\n"
        data_dir = srv.data_dir
        assert (data_dir is None) == (klass == "memory")
        if data_dir is not None:  # the durable floor wrote the put before answering
            with open(os.path.join(data_dir, "log"), "rb") as f:
                assert f.read(64).startswith(b"put 0 0 60 7\r\nhi-put!\r\n")
    finally:
        srv.stop()
    assert data_dir is None or not os.path.exists(data_dir)


def test_a_server_that_exits_before_answering_is_reported() -> None:
    with pytest.raises(RuntimeError, match="exited"):
        sb.launch("stalkd", [*sb.STALKD, "--no-such-flag"], "memory", None)
