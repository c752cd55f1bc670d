"""``server_bench.py --split`` reads each round trip out of ``perf script`` lines of the server:
from a request's read to its reply's write on the same connection (in the server), and from
that write to the next request's read (outside it); reads that bring nothing are no request."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))  # after the rest: no shadowing
import serve_split  # noqa: E402  (bench/serve_split.py)

PID = 300


def _call(t: float, call: str, fd: int, result: int, tid: int = PID) -> list[str]:
    """A system call's two lines: its entry (with ``fd``) at ``t``, its exit 1 us later."""
    ret = result if result >= 0 else (1 << 64) + result  # perf prints a negative return unsigned
    return [f"  {PID}/{tid}  {t:.6f}: syscalls:sys_enter_{call}: fd: 0x{fd:08x}, buf: 0x1, count: 0x1000",
            f"  {PID}/{tid}  {t + 0.000001:.6f}: syscalls:sys_exit_{call}: 0x{ret:x}"]  # fmt: skip


def _script(*calls: list[str]) -> str:
    return "\n".join(line for c in calls for line in c)


def test_a_lone_connection_splits_at_the_read_and_the_reply() -> None:
    # requests read at 1.000 and 1.100 (ms apart), replies written 10 us and 30 us after each
    text = _script(
        _call(1.000000, "read", 7, 20),
        _call(1.000011, "writev", 7, 40),
        _call(1.000050, "read", 7, -11),  # EAGAIN: nothing came, no request
        _call(1.000100, "read", 7, 20),
        _call(1.000131, "write", 7, 40),
        _call(1.000200, "read", 7, 20),
    )
    got = serve_split.split(text)
    assert got is not None
    assert got.requests == 2
    assert got.inside_median == pytest.approx(20.0, abs=0.01)  # 10 and 30 us: read's exit -> write's entry
    assert got.inside_mean == pytest.approx(20.0, abs=0.01)
    # outside: the first reply's exit (1.000012) -> the next read's exit (1.000101): 89 us;
    # the second's (1.000132) -> the third read's (1.000201): 69 us
    assert got.outside_median == pytest.approx(79.0, abs=0.01)


def test_connections_are_paired_by_descriptor_not_by_order() -> None:
    # three connections' requests read, then their replies written in another order
    text = _script(
        _call(2.000000, "read", 7, 20),
        _call(2.000010, "read", 8, 20),
        _call(2.000020, "read", 9, 20),
        _call(2.000030, "writev", 9, 40),  # 9's reply: 9 us after its read returned
        _call(2.000035, "writev", 7, 40),  # 7's: 34 us
        _call(2.000300, "writev", 8, 40),  # 8's: 289 us (paired in order: 29, 24 and 279)
        _call(2.000500, "read", 7, 20),
    )
    got = serve_split.split(text)
    assert got is not None
    assert got.requests == 3
    assert got.inside_median == pytest.approx(34.0, abs=0.01)
    assert got.inside_mean == pytest.approx((9.0 + 34.0 + 289.0) / 3, abs=0.01)
    assert got.outside_median == pytest.approx(465.0, abs=0.01)  # 7's reply 2.000036 -> its read 2.000501


def test_a_run_without_an_answered_request_has_no_split() -> None:
    assert serve_split.split("") is None
    assert serve_split.split(_script(_call(3.0, "read", 7, 20))) is None  # read, never answered
    assert serve_split.split(_script(_call(3.0, "read", 7, 0), _call(3.1, "write", 7, 5))) is None  # the end
