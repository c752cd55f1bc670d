"""The shared test helpers that find a server's port: /proc look-ups and held ports."""

from __future__ import annotations

import doctest
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from support import (
    has_exited,
    listening_ports,
    log_tail,
    popen_logged,
    reserved_port,
    run_doctests,
    spawn_server,
    spawn_serving,
    start_beanstalkd,
    wait_serving,
)


def test_listening_ports_lists_listeners_in_fd_order_and_nothing_else() -> None:
    with socket.socket() as first, socket.socket(socket.AF_INET6) as second, \
            socket.socket() as bound_only:
        first.bind(("127.0.0.1", 0))
        first.listen()
        try:
            second.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback on this machine")
        second.listen()
        bound_only.bind(("127.0.0.1", 0))
        ports = listening_ports(os.getpid())
        # Then both listeners are found (IPv4 and IPv6), the first opened first, and a socket
        # that is only bound is not
        mine = [p for p in ports if p in (first.getsockname()[1], second.getsockname()[1],
                                          bound_only.getsockname()[1])]
        assert mine == [first.getsockname()[1], second.getsockname()[1]]


def test_a_reserved_port_refuses_connections_and_lets_a_reuseaddr_server_bind() -> None:
    with reserved_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


@pytest.mark.parametrize("over", ["tcp", "unix"])
def test_wait_serving_returns_once_stalkd_answers_and_leaves_no_connection_behind(
        over: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "stalkd.cli", "serve"]
    if over == "tcp":
        server = spawn_serving([*cmd, "-l", "127.0.0.1", "-p", "0"], what="stalkd",
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc, address = server.proc, ("127.0.0.1", server.port)
    else:
        address = str(tmp_path / "q.sock")
        proc = subprocess.Popen([*cmd, "-l", f"unix:{address}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        wait_serving(f"unix:{address}", proc=proc)
    try:
        family = socket.AF_INET if over == "tcp" else socket.AF_UNIX
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(address)
            # The first command is answered at once, and the probe's connection is already gone
            s.sendall(b"stats\r\n")
            reply = b""
            while b"\n---" not in reply or not reply.endswith(b"\r\n"):
                chunk = s.recv(65536)
                assert chunk
                reply += chunk
        assert b"\ncurrent-connections: 1\n" in reply
        assert b"\ncmd-list-tube-used: 1\n" in reply
    finally:
        proc.terminate()
        proc.wait(10)


def test_wait_serving_fails_at_once_when_the_server_exits(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match="exited with 3"):
        wait_serving(f"unix:{tmp_path / 'none.sock'}", timeout=60, proc=proc)


def test_has_exited_counts_a_zombie_as_exited() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        assert not has_exited(proc.pid)
        assert proc.stdin is not None
        proc.stdin.close()  # it exits; not reaped until wait(), so a zombie meanwhile
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        assert has_exited(proc.pid)
    finally:
        proc.wait()


def test_a_server_given_a_log_file_can_write_more_than_a_pipe_holds_before_listening(
        tmp_path: Path) -> None:
    # Given a server that writes 1 MiB (a pipe holds 64 KiB) before it listens
    chatty = ("import socket, sys\n"
              "sys.stderr.write('x' * (1 << 20)); sys.stderr.flush()\n"
              "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
              "print('listening', flush=True); sys.stdin.read()\n")
    log = tmp_path / "chatty.log"
    server = spawn_server([sys.executable, "-c", chatty], what="chatty", log=log,
                          stdin=subprocess.PIPE, timeout=60)
    try:
        # Then it comes up, and everything it wrote is in the file
        assert server.port > 0
        assert log.read_bytes() == b"x" * (1 << 20) + b"listening\n"
    finally:
        server.stop()


@pytest.mark.parametrize("spawn", [spawn_server, spawn_serving])
def test_a_server_that_does_not_come_up_shows_its_output_in_the_error(
        spawn: Any, tmp_path: Path) -> None:
    failing = "import sys; print('starting'); sys.exit('cannot open /nonexistent/wal: denied')"
    with pytest.raises(RuntimeError) as raised:
        spawn([sys.executable, "-c", failing], what="broken", log=tmp_path / "broken.log")
    message = str(raised.value)
    assert "exited with 1" in message
    assert "starting\ncannot open /nonexistent/wal: denied" in message
    assert str(tmp_path / "broken.log") in message


def test_doctests_leave_no_directory_in_the_temp_dir(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Given examples that open logs in tempfile.mkdtemp() directories, and a temp dir watched
    import stalkd.log.layout
    import stalkd.log.log

    real = tmp_path / "tmp"
    real.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(real))
    made: list[str] = []
    monkeypatch.setattr(tempfile, "mkdtemp", _recording(tempfile.mkdtemp, made))
    # When they run as doctests
    for module in (stalkd.log.log, stalkd.log.layout):
        result = run_doctests(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0
    # Then the directories they made are gone, and the temp dir is as it was
    assert len(made) > 2 and not any(os.path.exists(d) for d in made)
    assert list(real.iterdir()) == []
    assert tempfile.tempdir == str(real)


def _recording(mkdtemp: Any, made: list[str]) -> Any:
    def record(*args: Any, **kw: Any) -> str:
        d: str = mkdtemp(*args, **kw)
        made.append(d)
        return d

    return record


def test_every_doctest_run_goes_through_run_doctests() -> None:
    tests = Path(__file__).parent
    direct = [str(p.relative_to(tests)) for p in sorted(tests.rglob("*.py"))
              if p.name != "support.py" and re.search(r"\btestmod\(", p.read_text())]
    assert direct == []


def test_a_child_started_with_popen_logged_can_write_more_than_a_pipe_holds(tmp_path: Path) -> None:
    # Given a child that writes 2 MiB to stderr (a pipe holds 64 KiB) and then exits
    chatty = "import sys; sys.stderr.write('x' * (2 << 20)); print('end')"
    log = tmp_path / "chatty.log"
    proc = popen_logged([sys.executable, "-c", chatty], log)
    # Then it exits (nothing has to read it), and its output is in the log
    try:
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
        proc.wait()
    assert log.stat().st_size == (2 << 20) + len("end\n")
    assert log_tail(log, 6) == "xxend\n"


@pytest.mark.beanstalkd
def test_start_beanstalkd_gives_its_output_to_no_pipe(tmp_path: Path) -> None:
    for log in (None, tmp_path / "beanstalkd.log"):
        server = start_beanstalkd(log=log)
        try:
            outputs = [os.readlink(f"/proc/{server.proc.pid}/fd/{fd}") for fd in (1, 2)]
        finally:
            server.stop()
        assert not any(o.startswith("pipe:") for o in outputs), outputs


def test_session_files_are_removed_when_the_test_process_exits(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, "-c", "from support import session_file; import os; fd, p = "
         "session_file('x-', '.log'); os.write(fd, b'said'); print(p)"],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent), "TMPDIR": str(tmp_path)},
        capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert Path(made).is_relative_to(tmp_path)
    assert list(tmp_path.iterdir()) == []
