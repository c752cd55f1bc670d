"""The server over real sockets on ephemeral 127.0.0.1 ports: pipelining, blocking reserves,
half-close, limits, slow readers, UNIX sockets, start-up and flags at the process level.

Each test starts its own server process and stops it by PID.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.proc import SERVER_CMD, StalkdProcess, start_stalkd
from server.wire import Wire, stats
from support import (
    log_tail,
    popen_logged,
    wait_for_listener,
    wait_for_port,
    wait_serving,
    wait_until,
)


@pytest.fixture
def srv() -> Iterator[StalkdProcess]:
    s = start_stalkd()
    try:
        yield s
    finally:
        s.stop()


def test_pipelined_commands_in_one_packet_get_replies_in_order(srv: StalkdProcess) -> None:
    # Given 300 commands of mixed kinds sent as one write
    cmds, expected = [], []
    for i in range(1, 101):
        body = b"job%d" % i
        cmds.append(b"put %d 0 60 %d\r\n%s\r\n" % (i, len(body), body))
        expected.append(b"INSERTED %d\r\n" % i)
        cmds.append(b"peek %d\r\n" % i)
        expected.append(b"FOUND %d %d\r\n%s\r\n" % (i, len(body), body))
        cmds.append(b"delete %d\r\n" % (i - 1 if i > 1 else 999))
        expected.append(b"DELETED\r\n" if i > 1 else b"NOT_FOUND\r\n")
    with Wire(port=srv.port) as w:
        w.send(b"".join(cmds))
        # Then every reply arrives, in command order
        assert [w.reply() for _ in expected] == expected


def test_blocking_reserve_does_not_block_other_connections(srv: StalkdProcess) -> None:
    with Wire(port=srv.port) as a, Wire(port=srv.port) as b:
        assert a.cmd(b"watch jobs\r\n") == b"WATCHING 2\r\n"
        a.send(b"reserve\r\n")
        assert a.quiet(0.2)  # blocked
        # Other connections keep being served while a waits
        assert b.cmd(b"use jobs\r\n") == b"USING jobs\r\n"
        assert stats(b, b"stats-tube jobs\r\n")["current-waiting"] == "1"
        assert b.cmd(b"put 0 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
        assert a.reply() == b"RESERVED 1 2\r\nhi\r\n"


def test_commands_behind_a_blocked_reserve_run_after_it_in_order(srv: StalkdProcess) -> None:
    with Wire(port=srv.port) as a, Wire(port=srv.port) as b:
        # Given a reserve that blocks, followed in the same packet by more commands
        a.send(b"reserve-with-timeout 10\r\nlist-tube-used\r\nuse other\r\n")
        assert a.quiet(0.3)  # nothing, not even the later replies, overtakes the reserve
        assert b.cmd(b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
        # Then the reserve is answered first and the queued commands follow
        assert a.reply() == b"RESERVED 1 1\r\nx\r\n"
        assert a.reply() == b"USING default\r\n"
        assert a.reply() == b"USING other\r\n"


def test_half_close_ends_a_waiting_reserve_with_timed_out(srv: StalkdProcess) -> None:
    with Wire(port=srv.port) as a:
        a.send(b"reserve\r\n")
        assert a.quiet(0.2)
        a.sock.shutdown(socket.SHUT_WR)
        assert a.reply() == b"TIMED_OUT\r\n"
        assert a.closed()


def test_pipeline_then_half_close_gets_every_reply_then_eof(srv: StalkdProcess) -> None:
    with Wire(port=srv.port) as a:
        a.send(b"put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\nstats-job 2\r\n")
        a.sock.shutdown(socket.SHUT_WR)
        assert a.reply() == b"INSERTED 1\r\n"
        assert a.reply() == b"INSERTED 2\r\n"
        assert a.reply().startswith(b"OK ")
        assert a.closed()
    with Wire(port=srv.port) as b:  # the jobs are still there (a put is not undone by EOF)
        assert stats(b)["current-jobs-ready"] == "2"


def test_disconnect_of_a_reserver_hands_its_job_to_a_waiting_worker(srv: StalkdProcess) -> None:
    with Wire(port=srv.port) as a, Wire(port=srv.port) as b:
        assert a.cmd(b"put 0 0 100 1\r\nz\r\n") == b"INSERTED 1\r\n"
        assert a.cmd(b"reserve\r\n") == b"RESERVED 1 1\r\nz\r\n"
        b.send(b"reserve\r\n")
        assert b.quiet(0.2)
        a.close()
        assert b.reply() == b"RESERVED 1 1\r\nz\r\n"


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_never_reads_cannot_grow_server_memory() -> None:
    srv = start_stalkd("--max-output", "65536", "-z", "8192")
    try:
        with Wire(port=srv.port) as setup:
            assert setup.cmd(b"put 0 0 60 4096\r\n" + b"x" * 4096 + b"\r\n") == b"INSERTED 1\r\n"
            base = _rss_kib(srv.proc.pid)
        # Given a client that pipelines `peek 1` (8 bytes -> a 4 KiB reply) and never reads
        hog = socket.create_connection(("127.0.0.1", srv.port))
        hog.setblocking(False)
        chunk = b"peek 1\r\n" * 8192
        sent = 0
        stalled_at = None
        deadline = time.monotonic() + 20
        while sent < 64 * 2**20 and time.monotonic() < deadline:  # 8M peeks = 32 GiB of replies
            try:
                sent += hog.send(chunk)
                stalled_at = None
            except BlockingIOError:
                if stalled_at is None:
                    stalled_at = time.monotonic()
                elif time.monotonic() - stalled_at > 1.0:
                    break  # the server stopped reading us
                time.sleep(0.01)
        # Then the server stopped reading long before our 64 MiB of commands were in ...
        print(f"the server stopped reading after {sent} bytes of commands")
        assert sent < 64 * 2**20
        # ... its memory stayed bounded (far below the 2 GiB the replies would need) ...
        grown = _rss_kib(srv.proc.pid) - base
        assert grown < 100 * 1024, f"server RSS grew by {grown} KiB"
        # ... and everyone else is still served
        with Wire(port=srv.port) as other:
            assert other.cmd(b"peek 1\r\n").startswith(b"FOUND 1 4096\r\n")
        hog.close()
        with Wire(port=srv.port) as other:  # the hog's departure is handled too (once its EOF is read)
            wait_until(lambda: stats(other)["current-connections"] == "1", "the hog's connection to close")
    finally:
        srv.stop()


def test_max_connections_refuses_the_extra_connection() -> None:
    srv = start_stalkd("--max-connections", "2")
    try:
        with Wire(port=srv.port) as a, Wire(port=srv.port) as b:
            assert a.cmd(b"use a\r\n") == b"USING a\r\n"
            assert b.cmd(b"use b\r\n") == b"USING b\r\n"
            with Wire(port=srv.port) as c:
                c.send(b"use c\r\n")
                assert c.closed()
            a.close()  # counted closed once the server reads its EOF
            wait_until(lambda: stats(b)["current-connections"] == "1", "a's connection to close")
            with Wire(port=srv.port) as d:
                assert d.cmd(b"use d\r\n") == b"USING d\r\n"
        assert "is the limit (--max-connections)" in srv.log_text()
    finally:
        srv.stop()


def _start_unix(path: str, *flags: str) -> subprocess.Popen[bytes]:
    """stalkd listening on ``path``, its output in ``path + ".out"`` (``_output``)."""
    return popen_logged([*SERVER_CMD, "-l", f"unix:{path}", *flags], Path(path + ".out"))


def _output(path: str) -> str:
    return log_tail(Path(path + ".out"))


def _wait_unix(path: str, proc: subprocess.Popen[bytes]) -> None:
    try:
        wait_serving(f"unix:{path}", proc=proc)
    except RuntimeError:
        raise AssertionError(_output(path)) from None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_unix_socket_replaces_a_stale_socket_file(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "s.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # the file stays behind, nobody listens: what a crashed server leaves
    proc = _start_unix(path)
    try:
        _wait_unix(path, proc)
        with Wire(unix=path) as w:
            assert w.cmd(b"put 0 0 60 3\r\nabc\r\n") == b"INSERTED 1\r\n"
            assert w.cmd(b"peek 1\r\n") == b"FOUND 1 3\r\nabc\r\n"
    finally:
        _stop(proc)


def test_unix_socket_never_removes_a_regular_file(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "data.txt")
    with open(path, "w") as f:
        f.write("precious")
    proc = _start_unix(path)
    try:
        assert proc.wait(10) == 111  # beanstalkd's status when it cannot listen
        assert "not a socket" in _output(path)
        with open(path) as f:
            assert f.read() == "precious"
    finally:
        _stop(proc)


def test_unknown_flag_exits_5_like_beanstalkd() -> None:
    out = subprocess.run([*SERVER_CMD, "-x"], capture_output=True, timeout=30)
    assert out.returncode == 5
    assert b"unknown flag: -x" in out.stderr


def test_port_in_use_exits_111_naming_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([*SERVER_CMD, "-l", "127.0.0.1", "-p", str(port)],
                             capture_output=True, timeout=30)
    assert out.returncode == 111
    assert f"127.0.0.1:{port}".encode() in out.stderr


def test_listens_early_and_answers_commands_sent_before_start_up_finished() -> None:
    t0 = time.monotonic()
    proc = subprocess.Popen([*SERVER_CMD, "-l", "127.0.0.1", "-p", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Connect as soon as the port listens and send at once, before start-up has finished
        port = wait_for_listener(proc, timeout=20, what="stalkd")
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        elapsed = time.monotonic() - t0
        print(f"exec -> accepting connections: {elapsed * 1000:.0f} ms")  # measured, not asserted
        w = Wire.__new__(Wire)
        w.sock, w.buf = s, b""
        with w:
            assert w.cmd(b"put 0 0 60 1\r\nq\r\n") == b"INSERTED 1\r\n"
    finally:
        _stop(proc)


def test_data_dir_locked_by_another_server_exits_10(tmp_path: os.PathLike[str]) -> None:
    first = start_stalkd("-b", os.fspath(tmp_path))
    try:
        with Wire(port=first.port) as w:  # recovery done, directory locked
            assert w.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        out = subprocess.run([*SERVER_CMD, "-l", "127.0.0.1", "-p", "0", "-b", os.fspath(tmp_path)],
                             capture_output=True, timeout=30)
        assert out.returncode == 10
        assert b"another stalkd" in out.stderr
    finally:
        first.stop()


def test_start_up_log_says_where_jobs_live(tmp_path: os.PathLike[str]) -> None:
    mem = start_stalkd()
    disk = start_stalkd("-b", os.fspath(tmp_path), "-F")
    try:
        for s in (mem, disk):
            with Wire(port=s.port) as w:
                assert w.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        assert "in memory only" in mem.log_text()
        text = disk.log_text()
        assert f"data dir {os.fspath(tmp_path)}" in text and "durability never" in text
        assert "recovered 0 jobs" in text
    finally:
        mem.stop()
        disk.stop()


def test_wait_for_port_helper_sees_the_server() -> None:
    s = start_stalkd()
    try:
        wait_for_port("127.0.0.1", s.port, proc=s.proc)
    finally:
        s.stop()
