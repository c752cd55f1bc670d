"""Log basics: append/read round trips, offsets across segments, reopen, reader, lock, tickets."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stalkd.log import Log, LogError, LogLockedError, LogReader
from stalkd.log.fs import Faults
from stalkd.log.segment import segment_name
from support import wait_until


def test_append_read_round_trip_and_offsets(tmp_path: Path) -> None:
    # Given a fresh log, when records are appended singly and in a batch
    with Log.open(tmp_path, durability="never") as log:
        assert log.append(b"first") == 0
        assert log.append_many([b"", b"x" * 1000, b"third"]) == (1, 3)
        assert log.append_many([]) == (4, 3)  # empty batch: nothing written
        # Then offsets are dense and payloads come back exactly, zero-length included
        frames = list(log.read(0))
        assert [f.offset for f in frames] == [0, 1, 2, 3]
        assert [f.bytes() for f in frames] == [b"first", b"", b"x" * 1000, b"third"]
        assert isinstance(frames[0].payload, memoryview)
        assert [f.offset for f in log.read(1, 3)] == [1, 2]
        assert list(log.read(10)) == []
        assert all(f.timestamp_us > 1_600_000_000_000_000 for f in frames)


def test_offsets_continue_across_segments_and_reopen(tmp_path: Path) -> None:
    payloads = [bytes([i % 256]) * (i % 300) for i in range(500)]
    with Log.open(tmp_path, segment_size=4096, durability="always") as log:
        for i in range(0, 500, 7):
            log.append_many(payloads[i : i + 7])
        assert log.next_offset == 500 and log.durable_offset == 500
    with Log.open(tmp_path, segment_size=4096) as log:
        assert log.next_offset == 500
        assert [f.bytes() for f in log.read(0)] == payloads
        assert log.append(b"more") == 500
    segs = LogReader(tmp_path).segments()
    assert len(segs) > 10
    assert segs[0].base_offset == 0 and all(s.sealed for s in segs[:-1]) and not segs[-1].sealed
    for a, b in zip(segs, segs[1:], strict=False):
        assert a.end_offset == b.base_offset
        assert os.path.basename(b.path) == segment_name(b.base_offset)


def test_payload_larger_than_a_segment_gets_its_own(tmp_path: Path) -> None:
    big = os.urandom(10_000)
    with Log.open(tmp_path, segment_size=1024, durability="never") as log:
        log.append(b"a")
        assert log.append(big) == 1
        log.append(b"c")
    with Log.open(tmp_path, segment_size=1024) as log:
        assert [f.bytes() for f in log.read(0)] == [b"a", big, b"c"]


def test_reader_sees_only_written_frames_while_writer_appends(tmp_path: Path) -> None:
    with Log.open(tmp_path, segment_size=8192, durability="never") as log:
        log.append_many([b"%d" % i for i in range(100)])
        reader = LogReader(tmp_path)
        assert [f.bytes() for f in reader.read(95)] == [b"95", b"96", b"97", b"98", b"99"]
        log.append_many([b"%d" % i for i in range(100, 1000)])
        got = [int(f.bytes()) for f in reader.read(0)]
        assert got == list(range(1000))
        seg = reader.segments()[1]
        assert seg.end_offset is not None
        assert [f.offset for f in reader.read_segment(seg.path)] == list(range(seg.base_offset, seg.end_offset))
        reader.close()


def test_second_writer_gets_a_clear_error(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never"):
        with pytest.raises(LogLockedError, match=str(os.getpid())):
            Log.open(tmp_path)
        code = f"from stalkd.log import Log\nLog.open({str(tmp_path)!r})"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "LogLockedError" in proc.stderr and "already open" in proc.stderr
    with Log.open(tmp_path):  # the lock went with the first writer
        pass


def test_bad_durability_and_closed_log(tmp_path: Path) -> None:
    for bad in ("sometimes", "every:", "every:-1", "every:x"):
        with pytest.raises(ValueError, match="durability"):
            Log.open(tmp_path / "x", durability=bad)
    log = Log.open(tmp_path / "y", durability="every:5")
    log.append(b"a")
    log.close()
    with pytest.raises(LogError, match="closed"):
        log.append(b"b")


def test_threads_write_many_while_another_syncs(tmp_path: Path) -> None:
    # Given the server's pattern: one thread writes, another calls sync() concurrently
    with Log.open(tmp_path, segment_size=16384, durability="always") as log:
        stop = threading.Event()
        durable: list[int] = []

        def syncer() -> None:
            while not stop.is_set():
                durable.append(log.sync())

        th = threading.Thread(target=syncer)
        th.start()
        for i in range(300):
            log.write_many([b"r%d" % i, b"s%d" % i])
        stop.set()
        th.join()
        assert log.sync() == 600 == log.durable_offset
        assert durable == sorted(durable)
        assert [f.bytes() for f in log.read(598)] == [b"r299", b"s299"]


def test_concurrent_appenders_share_fsyncs(tmp_path: Path) -> None:
    fs = Faults()  # fails nothing here: it counts the calls that reach the disk
    with Log.open(tmp_path, durability="always", fs=fs) as log:
        before = fs.calls.get("fdatasync", 0)

        def worker(k: int) -> None:
            for i in range(50):
                log.append(b"%d-%d" % (k, i))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        syncs = fs.calls.get("fdatasync", 0) - before
        assert log.durable_offset == 400
        got = sorted(f.bytes() for f in log.read(0))
        assert got == sorted(b"%d-%d" % (k, i) for k in range(8) for i in range(50))
        assert 0 < syncs < 400  # group commit: fewer fsyncs than appends


def test_ticket_resolves_when_durable_and_is_awaitable(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="always") as log:
        t = log.submit([b"a", b"b"])
        assert (t.first, t.last) == (0, 1)
        t.wait(timeout=30)
        assert t.done() and log.durable_offset >= 2
        seen: list[int] = []
        t.add_done_callback(lambda tk: seen.append(tk.last))
        assert seen == [1]

        async def main() -> tuple[int, int]:
            tickets = [log.submit([b"x%d" % i]) for i in range(20)]
            for tk in tickets:
                await tk
            return tickets[0].first, tickets[-1].last

        assert asyncio.run(main()) == (2, 21)
        assert log.durable_offset == 22
    with Log.open(tmp_path / "n", durability="never") as log:
        assert log.submit([b"x"]).done()


def test_a_ticket_for_what_write_many_wrote_resolves_once_the_committer_fsynced_it(tmp_path: Path) -> None:
    fs = Faults()  # fails nothing: counts the calls that reach the disk
    with Log.open(tmp_path, durability="always", fs=fs) as log:
        assert log.ticket().done()  # nothing written: nothing to wait for
        log.write_many([b"a", b"b", b"c"])
        before = fs.calls.get("fdatasync", 0)
        t = log.ticket()
        assert t.last == 2
        ended: list[int] = []
        t.add_done_callback(lambda tk: ended.append(log.durable_offset))
        t.wait(timeout=30)  # nobody but the log's committer thread fsyncs here
        assert t.exception() is None
        # Callbacks run on the committer's thread after the waiters are woken (ticket.py), so
        # wait() may return first.
        wait_until(lambda: ended, "the ticket's callback", 30)
        assert ended[0] >= 3
        assert fs.calls.get("fdatasync", 0) > before
        assert log.ticket().done()  # everything written is durable


@pytest.mark.parametrize("io", ["auto", "pwrite", "mmap"])
def test_every_write_path_writes_the_same_log(tmp_path: Path, io: str) -> None:
    payloads = [os.urandom(i % 200) for i in range(400)]
    with Log.open(tmp_path, segment_size=4096, durability="always", io=io) as log:  # type: ignore[arg-type]
        for p in payloads[:150]:
            log.append(p)
        log.append_many(payloads[150:300])
        log.submit(payloads[300:]).wait(timeout=60)
        # another process's view (LogReader) sees what the mapping or pwrite put in the page cache
        assert [f.bytes() for f in LogReader(tmp_path).read(0)] == payloads
    with Log.open(tmp_path, segment_size=4096, io="pwrite") as log:
        assert [f.bytes() for f in log.read(0)] == payloads
    with pytest.raises(ValueError, match="io must be"):
        Log.open(tmp_path / "z", io="aio")  # type: ignore[arg-type]


def test_tickets_resolved_by_a_segment_roll_still_wake_their_awaiters(tmp_path: Path) -> None:
    with Log.open(tmp_path, segment_size=1024, durability="always") as log:

        async def main() -> int:
            tickets = [log.submit([b"t" * 40] * (1 + i % 5)) for i in range(300)]  # many roll-overs
            await asyncio.wait_for(asyncio.gather(*(asyncio.ensure_future(_wait(t)) for t in tickets)), 60)
            return tickets[-1].last

        async def _wait(t: object) -> None:
            await t  # type: ignore[misc]

        last = asyncio.run(main())
        assert log.durable_offset == last + 1


def test_every_policy_flushes_in_the_background(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="every:5") as log:
        log.write_many([b"a", b"b"])  # no inline commit at all: only the flusher can make it durable
        # Polled: the commit's condition is notified only for tickets and wait_visible waiters,
        # and this policy makes neither.
        wait_until(lambda: log.durable_offset >= 2, "the background flush", timeout=60, step=0.001)
        assert log.durable_offset == 2
