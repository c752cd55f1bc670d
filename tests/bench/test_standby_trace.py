"""``standby_bench.py --trace`` reads a batch's path out of ``perf script`` lines: the primary's
WAL write and frames message, the standby's append, its fsync and acknowledgement, the primary's
read of it and its own fsync; a batch with no acknowledgement yet is left out."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))  # after the rest: no shadowing
import standby_bench  # noqa: E402  (bench/standby_bench.py)

P, S = 100, 200  # the primary's and the standby's pids (their loops' tids too)


def _line(pid: int, tid: int, t: float, side: str, call: str, args: str = "") -> str:
    return f"  {pid}/{tid}  {t:.6f}: syscalls:sys_{side}_{call}: {args}"


def _script(*batches: list[str]) -> str:
    """The batches' lines in time order, as ``perf script`` prints them."""
    return "\n".join(sorted((line for b in batches for line in b), key=lambda x: float(x.split()[1][:-1])))


def _switch(pid: int, tid: int, t: float, state: str) -> str:
    return (f"  {pid}/{tid}  {t:.6f}: sched:sched_switch: prev_comm=python prev_pid={tid} prev_prio=120 "
            f"prev_state={state} ==> next_comm=swapper/0 next_pid=0 next_prio=120")


def _batch(t: float, size: int, ack_at: float, pos: int = 64, header: int = 25) -> list[str]:
    """One batch of ``size`` bytes at ``pos`` in the segment, written and sent at ``t`` (behind
    a ``header``: stalkd's frames message, or the floor's length); the standby appends it at the
    same position, its fsync ends and it acknowledges at ``ack_at``, the primary's own fsync
    ends 1 ms after ``t``."""
    at = f"count: 0x{size:08x}, pos: 0x{pos:08x}"
    return [
        _line(P, P, t, "enter", "pwrite64", f"fd: 0x00000022, buf: 0x1, {at}"),
        _line(P, P, t + 0.0001, "enter", "write", f"fd: 0x00000012, buf: 0x1, count: 0x{size + header:08x}"),
        _line(P, P + 5, t + 0.0002, "enter", "fdatasync", "fd: 0x00000022"),
        _line(S, S, t + 0.0005, "enter", "pwrite64", f"fd: 0x0000000e, buf: 0x1, {at}"),
        _line(S, S + 3, t + 0.0006, "enter", "fdatasync", "fd: 0x0000000e"),
        _line(P, P + 5, t + 0.001, "exit", "fdatasync", "0x0"),
        _line(S, S + 3, ack_at - 0.0001, "exit", "fdatasync", "0x0"),
        _line(S, S, ack_at, "enter", "write", "fd: 0x00000012, buf: 0x1, count: 0x00000008"),
        _line(P, P, ack_at + 0.0001, "enter", "read", "fd: 0x00000012, buf: 0x1, count: 0x0003e800"),
    ]


def test_each_batch_is_followed_from_its_send_to_the_acknowledgement_read() -> None:
    # the second batch's acknowledgement comes before the primary's own fsync is done; the
    # first one's waits behind a client's read, and its read releases a reply 0.1 ms later
    extra = [_line(P, P, 1.00305, "enter", "read", "fd: 0x00000015, buf: 0x1, count: 0x0003e800"),
             _line(P, P, 1.0032, "enter", "writev", "fd: 0x00000015, vec: 0x1, vlen: 0x00000040")]  # fmt: skip
    out = standby_bench._critical_path(_script(_batch(1.0, 4096, 1.003), extra, _batch(1.01, 8192, 1.0108, 4160)),
                                       P, S)  # fmt: skip
    assert out.startswith("2 of 2 batches matched")
    assert "send->standby append 0.40/0.40 " in out  # both batches: 0.4 ms
    # the acknowledgement read 3.0 and 0.8 ms after the send (the median of two: their mean)
    assert "send->ack read 1.90/1.90 " in out
    assert "WAL write->local fsync done 1.00/1.00 " in out
    assert "the acknowledgement came after the local fsync for 50% of them" in out
    assert "the primary read 0.5 client connections on average (none for 50%)" in out
    assert "its read -> the first reply written 0.10 ms (median);" in out


def test_a_batch_not_yet_acknowledged_is_not_matched() -> None:
    unacked = [line for line in _batch(2.0, 4096, 2.002, 4160) if not line.startswith(f"  {S}/{S}  2.002000")]
    out = standby_bench._critical_path(_script(_batch(1.0, 4096, 1.003), unacked), P, S)
    assert out.startswith("1 of 2 batches matched")
    assert standby_bench._critical_path("", P, S).startswith("no batch matched")


def test_messages_appended_together_are_matched_by_position() -> None:
    """The standby read two messages at once and appended them with one pwrite: both batches
    end inside it, and the first is matched to it, not to a later append of its size."""
    first, second = _batch(1.0, 4096, 1.003), _batch(1.0002, 4096, 1.003, 4160)
    merged = [line for line in first if not (line.startswith(f"  {S}/{S} ") and "pwrite64" in line)]
    merged = [line.replace("count: 0x00001000, pos: 0x00001040", "count: 0x00002000, pos: 0x00000040")
              if line.startswith(f"  {S}/{S} ") and "pwrite64" in line else line for line in merged + second]  # fmt: skip
    later = _line(S, S, 1.5, "enter", "pwrite64", "fd: 0x0000000e, buf: 0x1, count: 0x00001000, pos: 0x00009040")
    out = standby_bench._critical_path(_script(merged, [later]), P, S)
    assert out.startswith("2 of 2 batches matched")
    # the merged append came 0.6 ms after the first send and 0.4 ms after the second (not 500 ms)
    assert "send->standby append 0.50/0.50 (0.60)" in out


def test_where_the_waits_were_spent_and_the_floors_messages() -> None:
    # The standby's loop slept (switched off in state S, no call since) when the first batch
    # came, and was busy (a call after its sleep) when the second did; the primary's loop was
    # inside an inline fsync of its own when the second acknowledgement was written.
    asleep = [_switch(S, S, 0.999, "S")]
    loop_fsync = [_line(P, P, 1.0105, "enter", "fdatasync", "fd: 0x00000022"),
                  _line(P, P, 1.0109, "exit", "fdatasync", "0x0")]  # fmt: skip
    for header in (25, 4):  # stalkd's frames messages, the floor's
        out = standby_bench._critical_path(
            _script(asleep, _batch(1.0, 4096, 1.003, header=header), _batch(1.01, 8192, 1.0108, 4160, header),
                    loop_fsync), P, S)  # fmt: skip
        assert out.startswith("2 of 2 batches matched"), out
        assert "send -> append: the standby's loop asleep for 50% (0.40 ms median); busy for 50% (0.40 ms median)" in out
        assert out.endswith("ack sent -> read: the primary's loop in an fsync for 50% (0.10 ms median); "
                            "not in one for 50% (0.10 ms median)")
    # a message of another size is not a batch's
    assert standby_bench._critical_path(_script(_batch(1.0, 4096, 1.003, header=9)), P, S).startswith("no batch")


def test_ratios_are_paired_round_by_round() -> None:
    # The machine slowed down for rounds 2 and 3: alone and sync both fell. The ratio of the two
    # medians (240k / 390k) is 0.62x; each round's own ratio is 0.60-0.75x, their median 0.68x.
    alone = [standby_bench.Run(r, 50.0, 0.0) for r in (400_000, 200_000, 210_000, 390_000, 410_000)]
    sync = [standby_bench.Run(r, 50.0, 0.0) for r in (300_000, 120_000, 150_000, 240_000, 280_000)]
    assert standby_bench._paired(sync, alone) == "0.68x (0.62-0.71)"
    assert standby_bench._paired([], []) == "-"
