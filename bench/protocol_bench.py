"""Protocol hot path: parse one large pipelined buffer, encode many replies.

Prints per-item costs and ratios against references measured in the same run:
- ``split``: ``bytes.split(b"\\r\\n")`` over the same buffer, a floor no parser can beat;
- ``c-model``: the literal transcription of beanstalkd's input loop used as a test oracle
  (tests/protocol/cmodel.py), a straightforward implementation to improve on.
Each workload runs on both implementations in the same run: the pure-Python reference
(``parser.Parser``, ``replies.encode_line``) and the C accelerator when it is built
(``stalkd.protocol.accel``); ``C speed-up`` is the ratio of the two.
Whole-server throughput against beanstalkd itself is bench/server_bench.py's job.

Run: .venv/bin/python bench/protocol_bench.py [--quick]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.protocol.cmodel

from stalkd.protocol import NEED_DATA, accel, encode_reply  # noqa: E402
from stalkd.protocol.commands import JobReply, Reply  # noqa: E402
from stalkd.protocol.parser import Parser  # noqa: E402
from stalkd.protocol.replies import encode_line  # noqa: E402


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def workloads(n: int) -> dict[str, tuple[bytes, int]]:
    body100 = b"x" * 100
    body4k = b"y" * 4096
    puts100 = b"put 1024 0 60 100\r\n" + body100 + b"\r\n"
    puts4k = b"put 1024 0 60 4096\r\n" + body4k + b"\r\n"
    mixed = b"reserve\r\ndelete 123456\r\n"
    return {
        "put 100B": (puts100 * n, n),
        "put 4KiB": (puts4k * (n // 4), n // 4),
        "reserve+delete": (mixed * (n // 2), n),
        "use/watch/stats-job": (b"use emails\r\nwatch emails\r\nstats-job 42\r\n" * (n // 3), (n // 3) * 3),
    }


def parse_all(data: bytes, chunk: int, parser: type[Parser] = Parser) -> int:
    p = parser()
    count = 0
    nxt = p.next
    for i in range(0, len(data), chunk):
        p.feed(data[i : i + chunk])
        while nxt() is not NEED_DATA:
            count += 1
    return count


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        return
    quick = "--quick" in sys.argv
    n = 20_000 if quick else 100_000
    repeat = 3 if quick else 5
    try:
        from tests.protocol.cmodel import CModel
    except ImportError:
        CModel = None  # type: ignore[assignment,misc]  # noqa: N806
    compiled = accel.CParser
    print(f"{'workload':<22}{'items':>8}{'python µs/item':>16}{'Mitems/s':>10}{'vs split':>10}{'vs c-model':>12}"
          f"{'C µs/item':>11}{'C speed-up':>12}")
    for name, (data, items) in workloads(n).items():
        got = parse_all(data, 65536)
        assert got == items, (name, got, items)
        t = best_of(lambda d=data: parse_all(d, 65536), repeat)
        fast = "  (C accelerator not built)"
        if compiled is not None:
            assert parse_all(data, 65536, compiled) == items
            t_c = best_of(lambda d=data: parse_all(d, 65536, compiled), repeat)
            fast = f"{t_c / items * 1e6:>11.3f}{t / t_c:>11.1f}x"
        t_split = best_of(lambda d=data: d.split(b"\r\n"), repeat)
        model = ""
        if CModel is not None:
            sub = data[: len(data) // 10]
            sub_items = parse_all(sub, 65536)
            t_model = best_of(lambda s=sub: CModel(65535).run([s[i : i + 65536] for i in range(0, len(s), 65536)]), 1)
            model = f"{(t_model / sub_items) / (t / items):>11.1f}x"
        print(f"{name:<22}{items:>8}{t / items * 1e6:>16.3f}{items / t / 1e6:>10.2f}"
              f"{t_split / t:>10.2f}{model:>12}{fast}")  # fmt: skip
    # reply encoding
    replies = [Reply("INSERTED", (123456,)), Reply("DELETED"), JobReply("RESERVED", 123456, b"x" * 100)]
    for r in replies:
        t = best_of(lambda r=r: [encode_reply(r) for _ in range(n)], repeat)  # type: ignore[misc]
        line = f"encode {type(r).__name__}({getattr(r, 'word', '')}): {t / n * 1e6:.3f} µs/reply"
        if type(r) is Reply:
            t_py = best_of(lambda r=r: [encode_line(r) for _ in range(n)], repeat)  # type: ignore[misc]
            line += f"; encode_line python {t_py / n * 1e6:.3f}"
            if accel.speedups is not None:
                c_line = accel.speedups.encode_line
                t_c = best_of(lambda r=r, f=c_line: [f(r) for _ in range(n)], repeat)  # type: ignore[misc]
                line += f", C {t_c / n * 1e6:.3f} ({t_py / t_c:.1f}x)"
        print(line)


if __name__ == "__main__":
    main()
