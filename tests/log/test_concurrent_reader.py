"""A reader in this process while a writer process appends and rolls segments: every read is a
dense, intact prefix of what the writer wrote, and prefixes only grow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from stalkd.log import Log, LogCorruptError, LogReader

CHILD = Path(__file__).with_name("writer_child.py")
N = 20_000


def expected(i: int) -> bytes:
    return b"%d|" % i + b"#" * (i % 97)


def test_reader_beside_a_writer_process(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(CHILD), str(tmp_path), str(N)])
    seen, reads = 0, 0
    try:
        while True:
            done = proc.poll() is not None
            if any(tmp_path.glob("seg-*.log")):
                with LogReader(tmp_path) as reader:
                    n = 0
                    for f in reader.read(0):
                        assert f.offset == n and f.bytes() == expected(n)
                        n += 1
                assert n >= seen
                seen, reads = n, reads + 1
            if done:
                break
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0 and seen == N and reads > 1


@settings(max_examples=60, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), min_size=1, max_size=6))
def test_random_damage_to_the_active_segment_recovers_a_prefix(tmp_path_factory: object, flips: list[tuple[int, int]]) -> None:
    d = tmp_path_factory.mktemp("fuzz")  # type: ignore[attr-defined]
    with Log.open(d, segment_size=16384, durability="never") as log:
        log.append_many([expected(i) for i in range(120)])
    (seg,) = sorted(d.glob("seg-*.log"))
    data = bytearray(seg.read_bytes())
    for pos, bit in flips:
        data[64 + pos % (len(data) - 64)] ^= 1 << bit  # anywhere after the header
    seg.write_bytes(bytes(data))
    try:
        Log.open(d, segment_size=16384, durability="never").close()
    except LogCorruptError as e:
        # damage (valid frames beyond the bad one) is refused, and cut by an explicit repair
        assert "valid frame" in str(e) and "stalkd log repair" in str(e)
        Log.open(d, segment_size=16384, durability="never", repair=True).close()
    with Log.open(d, segment_size=16384, durability="never") as log:
        assert log.repair_report is None
        got = [f.bytes() for f in log.read(0)]
        assert got == [expected(i) for i in range(len(got))]  # a prefix, never garbage
        assert log.append(b"after") == len(got)
