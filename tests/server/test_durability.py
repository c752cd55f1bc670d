"""What an acknowledgement promises, through the real server: SIGKILL, restart on the same
directory, and the state is exactly what was acknowledged. Also SIGTERM and SIGUSR1."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from server.proc import start_stalkd
from server.wire import Wire, stats


@pytest.mark.parametrize("policy", [[], ["-F"], ["-f", "20"]], ids=["always", "never", "every-20ms"])
def test_acknowledged_state_survives_sigkill(tmp_path: os.PathLike[str], policy: list[str]) -> None:
    d = os.fspath(tmp_path)
    s = start_stalkd("-b", d, *policy)
    try:
        with Wire(port=s.port) as w:
            # Given jobs put, buried, released with a delay and deleted, every reply received
            assert w.cmd(b"use emails\r\n") == b"USING emails\r\n"
            for i in range(1, 6):
                assert w.cmd(b"put %d 0 60 5\r\nbody%d\r\n" % (i, i)) == b"INSERTED %d\r\n" % i
            assert w.cmd(b"watch emails\r\n") == b"WATCHING 2\r\n"
            assert w.cmd(b"reserve\r\n") == b"RESERVED 1 5\r\nbody1\r\n"
            assert w.cmd(b"bury 1 77\r\n") == b"BURIED\r\n"
            assert w.cmd(b"reserve\r\n") == b"RESERVED 2 5\r\nbody2\r\n"
            assert w.cmd(b"release 2 9 3600\r\n") == b"RELEASED\r\n"
            assert w.cmd(b"delete 3\r\n") == b"DELETED\r\n"
            assert w.cmd(b"reserve\r\n") == b"RESERVED 4 5\r\nbody4\r\n"  # reserved, not acked
            # When the server is killed without warning
            s.kill9()
    finally:
        s.stop()
    s2 = start_stalkd("-b", d, *policy)
    try:
        with Wire(port=s2.port) as w:
            # Then the restarted server holds exactly the acknowledged state
            j1 = stats(w, b"stats-job 1\r\n")
            assert (j1["state"], j1["pri"], j1["tube"]) == ("buried", "77", "emails")
            j2 = stats(w, b"stats-job 2\r\n")
            assert (j2["state"], j2["pri"], j2["delay"]) == ("delayed", "9", "3600")
            assert 3500 < int(j2["time-left"]) <= 3600  # the delay keeps its wall-clock deadline
            assert w.cmd(b"stats-job 3\r\n") == b"NOT_FOUND\r\n"
            assert stats(w, b"stats-job 4\r\n")["state"] == "ready"  # reserve is not durable
            assert stats(w, b"stats-job 5\r\n")["state"] == "ready"
            assert w.cmd(b"peek 5\r\n") == b"FOUND 5 5\r\nbody5\r\n"
            # and ids continue after the largest one: at once under "always"; under the weaker
            # policies from the durable id ceiling, past any id a lost put might have had
            reply = w.cmd(b"put 0 0 60 1\r\nn\r\n")
            assert re.fullmatch(rb"INSERTED (\d+)\r\n", reply), reply
            new_id = int(reply.split()[1])
            assert new_id == 6 if not policy else new_id > 6
            assert w.cmd(b"use emails\r\n") == b"USING emails\r\n"
            assert w.cmd(b"kick 10\r\n") == b"KICKED 1\r\n"  # the buried job 1
    finally:
        s2.stop()


def test_pipelined_puts_acknowledged_before_sigkill_all_come_back(tmp_path: os.PathLike[str]) -> None:
    d = os.fspath(tmp_path)
    s = start_stalkd("-b", d)
    n = 500
    try:
        with Wire(port=s.port) as w:
            w.send(b"".join(b"put 0 0 60 4\r\nj%03d\r\n" % (i % 1000) for i in range(n)))
            acked = [w.reply() for _ in range(n)]
            assert acked == [b"INSERTED %d\r\n" % i for i in range(1, n + 1)]
            s.kill9()
    finally:
        s.stop()
    s2 = start_stalkd("-b", d)
    try:
        with Wire(port=s2.port) as w:
            assert stats(w)["current-jobs-ready"] == str(n)
    finally:
        s2.stop()


def test_sigterm_finishes_replies_syncs_and_exits_0(tmp_path: os.PathLike[str]) -> None:
    d = os.fspath(tmp_path)
    s = start_stalkd("-b", d)
    try:
        with Wire(port=s.port) as w, Wire(port=s.port) as waiter:
            waiter.send(b"reserve-with-timeout 60\r\n")
            assert waiter.quiet(0.1)
            assert w.cmd(b"put 0 0 60 2\r\nok\r\n") == b"INSERTED 1\r\n"
            assert waiter.reply() == b"RESERVED 1 2\r\nok\r\n"
            waiter.send(b"reserve-with-timeout 60\r\n")  # blocked again when the signal comes
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGTERM)
            assert s.proc.wait(timeout=10) == 0
            print(f"SIGTERM -> exit: {(time.monotonic() - t0) * 1000:.0f} ms")  # measured, not asserted
            assert waiter.closed()  # the waiting connection is closed, not left hanging
        assert "SIGTERM: stopping" in s.log_text() and "stopped (exit 0)" in s.log_text()
        # The stop line says how well group commit grouped (at least the put's fsync happened).
        assert re.search(r"\d+ WAL records written, [1-9]\d* fsyncs \(\d+\.\d records per fsync, "
                         r"\d+ on the loop thread\)",
                         s.log_text())
    finally:
        s.stop()
    s2 = start_stalkd("-b", d)
    try:
        with Wire(port=s2.port) as w:
            assert stats(w, b"stats-job 1\r\n")["state"] == "ready"  # its reserver went away
    finally:
        s2.stop()


def test_sigusr1_turns_drain_mode_on() -> None:
    s = start_stalkd()
    try:
        with Wire(port=s.port) as w:
            assert w.cmd(b"put 0 0 60 1\r\na\r\n") == b"INSERTED 1\r\n"
            s.proc.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while stats(w)["draining"] != "true":
                assert time.monotonic() < deadline, "drain mode never turned on"
                time.sleep(0.01)
            assert w.cmd(b"put 0 0 60 1\r\nb\r\n") == b"DRAINING\r\n"
            assert w.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\na\r\n"  # workers go on
            assert w.cmd(b"delete 1\r\n") == b"DELETED\r\n"
        assert "drain mode on" in s.log_text()
    finally:
        s.stop()
